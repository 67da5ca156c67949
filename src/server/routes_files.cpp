// ComfyUI's file routes: GET /view (output, input and temp images) and POST /upload/image,
// with every client path confined to its folder (server/safe_path.h).
#include <filesystem>

#include "server/atomic_file.h"
#include "server/multipart.h"
#include "server/routes.h"
#include "server/safe_path.h"

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

// Note [view previews]: ComfyUI's preview=webp;90 and channel= re-encode the image; headroom
// has no WebP/JPEG encoder and serves the stored file, which every client can show.
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

HttpResponse post_upload(const ServerContext& ctx, const HttpRequest& req) {
  Result<std::vector<MultipartPart>> parts = multipart_parse(req.content_type, req.body);
  if (!parts.ok()) return HttpResponse::error(400, parts.status().message());
  const MultipartPart* image = multipart_find(*parts, "image");
  if (!image || image->filename.empty())
    return HttpResponse::error(400, "no image file in the form");
  auto field = [&](const char* name, const std::string& def) {
    const MultipartPart* f = multipart_find(*parts, name);
    return f ? f->data : def;
  };
  const std::string type = field("type", "input"), subfolder = field("subfolder", "");
  const std::string overwrite = field("overwrite", "false");
  const std::string folder = folder_of(ctx.config, type);
  if (folder.empty()) return HttpResponse::error(400, "type must be output, input or temp");
  Result<fs::path> p =
      path_confined(folder, subfolder, fs::path(image->filename).filename().string());
  if (!p.ok()) return HttpResponse::error(403, p.status().message());
  std::error_code ec;
  fs::create_directories(p->parent_path(), ec);
  if (ec) return HttpResponse::error(500, "cannot create the folder: " + ec.message());
  // The folder may have been replaced by a link since the check; check the created one again.
  Result<fs::path> again = path_confined(folder, subfolder, p->filename().string());
  if (!again.ok()) return HttpResponse::error(403, again.status().message());
  const fs::path dest = (overwrite == "true" || overwrite == "1") ? *p : path_unused(*p);
  Status st = file_write_atomic(dest, image->data);
  if (!st.ok()) return HttpResponse::error(500, st.message());
  return HttpResponse::json(
      200, Json{{"name", dest.filename().string()}, {"subfolder", subfolder}, {"type", type}});
}

}  // namespace

void routes_add_files(Router& r, ServerContext& ctx) {
  r.add("GET", "/view", [&ctx](const HttpRequest& req, auto&) { return get_view(ctx, req); });
  r.add("POST", "/upload/image",
        [&ctx](const HttpRequest& req, auto&) { return post_upload(ctx, req); });
}

}  // namespace hr
