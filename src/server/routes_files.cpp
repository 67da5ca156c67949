// ComfyUI's file routes: GET /view (output, input and temp images), POST /upload/image and
// /upload/mask, with every client path confined to its folder (core/path_confine.h).
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "core/json_parse.h"
#include "core/path_confine.h"
#include "core/png_io.h"
#include "server/image_mask.h"

#include "server/atomic_file.h"
#include "server/multipart.h"
#include "server/routes.h"
#include "server/view_transform.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// The folder of ComfyUI's `type` parameter, or "" for an unknown type.
std::string folder_of(const ServerConfig& c, const std::string& type) {
  if (type == "output") return c.output_dir;
  if (type == "input") return c.input_dir;
  if (type == "temp") return c.temp_dir;
  return "";
}

std::string mime_of(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".webp") return "image/webp";
  if (ext == ".gif") return "image/gif";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

std::string query_or(const HttpRequest& req, const std::string& key, const std::string& def) {
  auto it = req.query.find(key);
  return it == req.query.end() ? def : it->second;
}

// preview= and channel= re-encode the stored picture as ComfyUI does (server/view_transform.h).
HttpResponse get_view(const ServerContext& ctx, const HttpRequest& req) {
  const std::string filename = query_or(req, "filename", "");
  if (filename.empty()) return HttpResponse::error(400, "filename is required");
  const std::string folder = folder_of(ctx.config, query_or(req, "type", "output"));
  if (folder.empty()) return HttpResponse::error(400, "type must be output, input or temp");
  Result<fs::path> p = path_confined(folder, query_or(req, "subfolder", ""), filename);
  if (!p.ok())
    return HttpResponse::error(p.status().code() == ErrorCode::INVALID_ARGUMENT ? 403 : 400,
                               p.status().message());
  std::error_code ec;
  if (!fs::is_regular_file(*p, ec)) return HttpResponse::error(404, "no such file: " + filename);
  auto q = req.query.find("preview");
  std::optional<std::string> preview;
  if (q != req.query.end()) preview = q->second;
  Result<std::optional<ViewBody>> t = view_transform(p->string(), preview, query_or(req, "channel", ""));
  if (!t.ok()) return HttpResponse::error(400, t.status().message());
  if (t->has_value()) {
    HttpResponse r = HttpResponse::text(200, std::move((*t)->bytes), (*t)->mime);
    r.headers.push_back({"Content-Disposition", "filename=\"" + p->filename().string() + "\""});
    return r;
  }
  Result<std::string> data = file_read(*p);
  if (!data.ok()) return HttpResponse::error(404, data.status().message());
  HttpResponse r = HttpResponse::text(200, std::move(data).value(), mime_of(*p));
  r.headers.push_back({"Content-Disposition", "filename=\"" + p->filename().string() + "\""});
  return r;
}

// ComfyUI's naming when a file exists and overwrite is off: "name (1).ext", "name (2).ext", ...
fs::path path_unused(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return p;
  for (int i = 1;; ++i) {
    fs::path q = p.parent_path() /
                 (p.stem().string() + " (" + std::to_string(i) + ")" + p.extension().string());
    if (!fs::exists(q, ec)) return q;
  }
}

// Where an upload goes: ComfyUI's image_upload (type, subfolder, overwrite fields), confined to
// the type's folder.
struct UploadTarget {
  fs::path dest;
  std::string subfolder, type;
};

std::string form_field(const std::vector<MultipartPart>& parts, const char* name,
                       const std::string& def) {
  const MultipartPart* f = multipart_find(parts, name);
  return f ? f->data : def;
}

Result<UploadTarget> upload_target(const ServerContext& ctx,
                                   const std::vector<MultipartPart>& parts,
                                   const MultipartPart& image) {
  UploadTarget t;
  t.type = form_field(parts, "type", "input");
  t.subfolder = form_field(parts, "subfolder", "");
  const std::string overwrite = form_field(parts, "overwrite", "false");
  const std::string folder = folder_of(ctx.config, t.type);
  if (folder.empty())
    return make_error(ErrorCode::UNSUPPORTED, "type must be output, input or temp");
  const std::string name = fs::path(image.filename).filename().string();
  HR_ASSIGN_OR_RETURN(fs::path p, path_confined(folder, t.subfolder, name));
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return make_error(ErrorCode::IO, "cannot create the folder: {}", ec.message());
  // The folder may have been replaced by a link since the check; check the created one again.
  HR_ASSIGN_OR_RETURN(p, path_confined(folder, t.subfolder, name));
  t.dest = (overwrite == "true" || overwrite == "1") ? p : path_unused(p);
  return t;
}

// 403 for a path outside its folder (path_confined's INVALID_ARGUMENT), 500 for the server's
// own I/O, 400 for other bad input.
int upload_status(const Status& st) {
  if (st.code() == ErrorCode::IO) return 500;
  return st.code() == ErrorCode::INVALID_ARGUMENT ? 403 : 400;
}

HttpResponse upload_done(const UploadTarget& t) {
  return HttpResponse::json(
      200, Json{{"name", t.dest.filename().string()}, {"subfolder", t.subfolder}, {"type", t.type}});
}

HttpResponse post_upload(const ServerContext& ctx, const HttpRequest& req) {
  Result<std::vector<MultipartPart>> parts = multipart_parse(req.content_type, req.body);
  if (!parts.ok()) return HttpResponse::error(400, parts.status().message());
  const MultipartPart* image = multipart_find(*parts, "image");
  if (!image || image->filename.empty())
    return HttpResponse::error(400, "no image file in the form");
  Result<UploadTarget> t = upload_target(ctx, *parts, *image);
  if (!t.ok()) return HttpResponse::error(upload_status(t.status()), t.status().message());
  Status st = file_write_atomic(t->dest, image->data);
  if (!st.ok()) return HttpResponse::error(500, st.message());
  return upload_done(*t);
}

// The image original_ref names ({filename, subfolder, type}; ComfyUI's "name [type]" filename
// annotation too), confined to its folder. The type defaults to output, as in ComfyUI.
Result<fs::path> mask_original(const ServerContext& ctx, const std::string& ref_text) {
  Result<Json> parsed = json_parse(ref_text);
  if (!parsed.ok()) return Status(ErrorCode::CORRUPT, "original_ref: " + parsed.status().message());
  Json& ref = *parsed;
  if (!ref.is_object() || !ref.contains("filename") || !ref["filename"].is_string())
    return make_error(ErrorCode::CORRUPT, "original_ref must be a JSON object with a filename");
  std::string name = ref["filename"];
  std::string type = ref.value("type", "output");
  for (const char* t : {"output", "input", "temp"}) {
    const std::string tag = fmt::format(" [{}]", t);
    if (name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0) {
      name.resize(name.size() - tag.size());
      type = t;
    }
  }
  const std::string folder = folder_of(ctx.config, type);
  if (folder.empty())
    return make_error(ErrorCode::UNSUPPORTED, "type must be output, input or temp");
  const std::string subfolder = ref.contains("subfolder") && ref["subfolder"].is_string()
                                    ? ref["subfolder"].get<std::string>()
                                    : std::string();
  return path_confined(folder, subfolder, name);
}

// A PNG from memory, through a private file in the temp folder (png_read reads files).
Result<Image8> png_decode(const ServerContext& ctx, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = fs::path(ctx.config.temp_dir) /
                       fmt::format(".mask-upload-{}-{}.png", ::getpid(), counter++);
  HR_TRY(file_write_atomic(tmp, bytes));
  Result<Image8> img = png_read(tmp.string());
  std::error_code ec;
  fs::remove(tmp, ec);
  return img;
}

// ComfyUI's POST /upload/mask: the form's `image` is a mask whose alpha channel replaces the
// alpha of the image original_ref names; the result (RGBA PNG, the original's text chunks kept)
// is saved where /upload/image would save the mask. Unlike ComfyUI, which then saves nothing
// and still answers 200, a missing original is a 404, and a mask of another size a 400.
HttpResponse post_upload_mask(const ServerContext& ctx, const HttpRequest& req) {
  Result<std::vector<MultipartPart>> parts = multipart_parse(req.content_type, req.body);
  if (!parts.ok()) return HttpResponse::error(400, parts.status().message());
  const MultipartPart* image = multipart_find(*parts, "image");
  const MultipartPart* ref = multipart_find(*parts, "original_ref");
  if (!image || image->filename.empty())
    return HttpResponse::error(400, "no image file in the form");
  if (!ref) return HttpResponse::error(400, "no original_ref in the form");
  Result<fs::path> original = mask_original(ctx, ref->data);
  if (!original.ok())
    return HttpResponse::error(upload_status(original.status()), original.status().message());
  std::error_code ec;
  if (!fs::is_regular_file(*original, ec))
    return HttpResponse::error(404, "no such original image: " + original->filename().string());
  Result<Image8> base = png_read(original->string());
  if (!base.ok()) return HttpResponse::error(400, "original image: " + base.status().message());
  Result<Image8> mask = png_decode(ctx, image->data);
  if (!mask.ok()) return HttpResponse::error(400, "mask: " + mask.status().message());
  Result<Image8> out = image_alpha_apply(*base, *mask);
  if (!out.ok()) return HttpResponse::error(400, out.status().message());
  Result<UploadTarget> t = upload_target(ctx, *parts, *image);
  if (!t.ok()) return HttpResponse::error(upload_status(t.status()), t.status().message());
  Status st = png_write(t->dest.string(), *out);  // atomic: temporary name, then rename
  if (!st.ok()) return HttpResponse::error(500, st.message());
  return upload_done(*t);
}

}  // namespace

void routes_add_files(Router& r, ServerContext& ctx) {
  r.add("GET", "/view", [&ctx](const HttpRequest& req, auto&) { return get_view(ctx, req); });
  r.add("POST", "/upload/image",
        [&ctx](const HttpRequest& req, auto&) { return post_upload(ctx, req); });
  r.add("POST", "/upload/mask",
        [&ctx](const HttpRequest& req, auto&) { return post_upload_mask(ctx, req); });
}

}  // namespace hr
