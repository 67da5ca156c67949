// libpng-based PNG I/O.
#include "core/png_io.h"

#include <png.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

namespace hr {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

// The libpng calls of one encode; false when libpng failed (it reports errors by longjmp, so
// this function creates nothing with a destructor).
bool png_emit_rows(const Image8& img, std::vector<png_text>& texts,
                   const std::function<void(png_structp)>& setup) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  setup(png);
  png_set_IHDR(png, info, png_uint_32(img.width), png_uint_32(img.height), 8,
               img.channels == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, img.compress_level);
  if (!texts.empty()) png_set_text(png, info, texts.data(), int(texts.size()));
  png_write_info(png, info);
  size_t stride = size_t(img.width) * size_t(img.channels);
  for (int y = 0; y < img.height; ++y)
    png_write_row(png, const_cast<png_bytep>(img.pixels.data() + size_t(y) * stride));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

// Encodes `img` through libpng with its output set by `setup` (a file or a memory buffer).
Status png_emit(const Image8& img, const std::string& what,
                const std::function<void(png_structp)>& setup) {
  if (img.width <= 0 || img.height <= 0 || (img.channels != 3 && img.channels != 4) ||
      img.pixels.size() != size_t(img.width) * size_t(img.height) * size_t(img.channels))
    return make_error(ErrorCode::INVALID_ARGUMENT, "png {}: bad image {}x{}x{}", what, img.width,
                      img.height, img.channels);
  std::vector<png_text> texts(img.text.size());
  for (size_t i = 0; i < img.text.size(); ++i) {
    texts[i].compression = PNG_TEXT_COMPRESSION_NONE;
    texts[i].key = const_cast<char*>(img.text[i].first.c_str());
    texts[i].text = const_cast<char*>(img.text[i].second.c_str());
    texts[i].text_length = img.text[i].second.size();
  }
  if (!png_emit_rows(img, texts, setup))
    return make_error(ErrorCode::IO, "libpng failed writing {}", what);
  return Status();
}

void png_append(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}

void png_no_flush(png_structp) {}

}  // namespace

Result<std::string> png_encode(const Image8& img) {
  std::string out;
  HR_TRY(png_emit(img, "image in memory", [&out](png_structp png) {
    png_set_write_fn(png, &out, png_append, png_no_flush);
  }));
  return out;
}

Status png_write(const std::string& path, const Image8& img) {
  std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    FilePtr f(std::fopen(tmp.c_str(), "wb"));
    if (!f) return make_error(ErrorCode::IO, "cannot create {}: {}", tmp, std::strerror(errno));
    Status st = png_emit(img, path, [&f](png_structp png) { png_init_io(png, f.get()); });
    if (st.ok() && std::fflush(f.get()) != 0)
      st = make_error(ErrorCode::IO, "cannot write {}: {}", tmp, std::strerror(errno));
    if (!st.ok()) {
      f.reset();
      std::remove(tmp.c_str());
      return st;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::IO, "cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
  }
  return Status();
}

// Note [no overwrite]: workers of a shared output folder (`headroom worker`) pick names the same
// way at the same time. The picture is written once under a hidden temporary name, then given
// the next free name with link(), which fails when another process took that name first: the
// next name is tried, so two outputs never overwrite each other and a reader never sees half a
// file.
Result<std::string> png_write_next(const std::string& dir, const std::string& prefix,
                                   const Image8& img) {
  namespace fs = std::filesystem;
  const fs::path full = fs::path(dir) / prefix;
  const std::string tmp =
      (full.parent_path() / fmt::format(".{}.tmp-{}.png", full.filename().string(), ::getpid()))
          .string();
  HR_TRY(png_write(tmp, img));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::string path = png_next_name(dir, prefix);
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return path;
    }
    if (errno != EEXIST) break;
  }
  const int err = errno;
  ::unlink(tmp.c_str());
  return make_error(ErrorCode::IO, "cannot name {} in {}: {}", prefix, dir, std::strerror(err));
}

Result<Image8> png_read(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return make_error(ErrorCode::NOT_FOUND, "cannot open image {}: {}", path, std::strerror(errno));
  unsigned char sig[8];
  if (std::fread(sig, 1, 8, f.get()) != 8 || png_sig_cmp(sig, 0, 8) != 0)
    return make_error(ErrorCode::CORRUPT, "{} is not a PNG file", path);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    return make_error(ErrorCode::INTERNAL, "libpng init failed");
  }
  Image8* out = new Image8();  // owned manually across the longjmp boundary
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    delete out;
    return make_error(ErrorCode::CORRUPT, "{}: corrupt PNG data", path);
  }
  png_init_io(png, f.get());
  png_set_sig_bytes(png, 8);
  png_set_user_limits(png, 16384, 16384);
  png_read_info(png, info);
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_gray_to_rgb(png);
  png_set_packing(png);
  png_read_update_info(png, info);
  int w = int(png_get_image_width(png, info)), h = int(png_get_image_height(png, info));
  int ch = int(png_get_channels(png, info));
  out->width = w;
  out->height = h;
  out->channels = ch;
  out->pixels.resize(size_t(w) * size_t(h) * size_t(ch));
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) rows[size_t(y)] = out->pixels.data() + size_t(y) * size_t(w) * size_t(ch);
  png_read_image(png, rows.data());
  png_textp texts = nullptr;
  int ntext = 0;
  if (png_get_text(png, info, &texts, &ntext) > 0)
    for (int i = 0; i < ntext; ++i)
      out->text.emplace_back(texts[i].key, std::string(texts[i].text, texts[i].text_length));
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  Image8 result = std::move(*out);
  delete out;
  if (result.channels != 3 && result.channels != 4)
    return make_error(ErrorCode::UNSUPPORTED, "{}: {} channels after expansion", path, result.channels);
  return result;
}

std::string png_next_name(const std::string& dir, const std::string& prefix) {
  namespace fs = std::filesystem;
  fs::path full = fs::path(dir) / prefix;
  fs::path folder = full.parent_path();
  std::string base = full.filename().string();
  int next = 1;
  std::error_code ec;
  if (fs::is_directory(folder, ec)) {
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      std::string n = e.path().filename().string();
      // "<base>_<digits>_.png"
      if (n.size() <= base.size() + 7 || n.compare(0, base.size() + 1, base + "_") != 0) continue;
      if (n.substr(n.size() - 5) != "_.png") continue;
      std::string digits = n.substr(base.size() + 1, n.size() - base.size() - 6);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      next = std::max(next, std::stoi(digits) + 1);
    }
  }
  return (folder / fmt::format("{}_{:05}_.png", base, next)).string();
}

}  // namespace hr
