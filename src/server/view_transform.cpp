#include "server/view_transform.h"

#include <algorithm>
#include <csetjmp>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "core/png_io.h"

#ifdef HEADROOM_HAVE_WEBP
#include <webp/encode.h>
#endif
#ifdef HEADROOM_HAVE_JPEG
#include <jpeglib.h>
#endif

namespace hr {

namespace {

// Note [view channels]: as ComfyUI's /view: "rgb" drops the alpha channel; "a" keeps only it,
// as an RGBA picture with black colour and the source's alpha (opaque when it had none).
Image8 channel_pick(const Image8& src, const std::string& channel) {
  Image8 out;
  out.width = src.width;
  out.height = src.height;
  out.channels = channel == "a" ? 4 : 3;
  const size_t n = size_t(src.width) * size_t(src.height);
  out.pixels.assign(n * size_t(out.channels), 0);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &src.pixels[i * size_t(src.channels)];
    if (channel == "a") {
      out.pixels[i * 4 + 3] = src.channels == 4 ? p[3] : 255;
    } else {
      for (size_t c = 0; c < 3; ++c) out.pixels[i * 3 + c] = p[c];
    }
  }
  return out;
}

#ifdef HEADROOM_HAVE_WEBP
Result<std::string> webp_encode(const Image8& img, int quality) {
  uint8_t* data = nullptr;
  const int stride = img.width * img.channels;
  size_t n = img.channels == 4
                 ? WebPEncodeRGBA(img.pixels.data(), img.width, img.height, stride, float(quality), &data)
                 : WebPEncodeRGB(img.pixels.data(), img.width, img.height, stride, float(quality), &data);
  if (n == 0) return make_error(ErrorCode::INTERNAL, "WebP encoding failed");
  std::string out(reinterpret_cast<const char*>(data), n);
  WebPFree(data);
  return out;
}
#endif

#ifdef HEADROOM_HAVE_JPEG
// libjpeg's default error handler exits the process; this one jumps back to jpeg_rows, which
// creates nothing with a destructor (its buffer is malloc'd by libjpeg and freed by the caller).
struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
};

[[noreturn]] void jpeg_error_jump(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegErrors*>(cinfo->err)->jump, 1);
}

bool jpeg_rows(const Image8& rgb, int quality, unsigned char** buf, unsigned long* size) {
  jpeg_compress_struct cinfo{};
  JpegErrors err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_jump;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buf, size);
  cinfo.image_width = JDIMENSION(rgb.width);
  cinfo.image_height = JDIMENSION(rgb.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = size_t(rgb.width) * 3;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb.pixels.data() + size_t(cinfo.next_scanline) * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

Result<std::string> jpeg_encode(const Image8& rgb, int quality) {
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  bool ok = jpeg_rows(rgb, quality, &buf, &size);
  std::string out = ok && buf ? std::string(reinterpret_cast<const char*>(buf), size) : "";
  std::free(buf);
  if (out.empty()) return make_error(ErrorCode::INTERNAL, "JPEG encoding failed");
  return out;
}
#endif

// ComfyUI's preview= value: format (webp or jpeg; anything else, or an alpha channel asked
// for, becomes webp) and quality (the last ';' field when it is a number; default 90).
std::pair<std::string, int> preview_parse(const std::string& preview, const std::string& channel) {
  std::string format = preview.substr(0, preview.find(';'));
  if ((format != "webp" && format != "jpeg") || channel.find('a') != std::string::npos)
    format = "webp";
  int quality = 90;
  const size_t semi = preview.rfind(';');
  const std::string last = semi == std::string::npos ? "" : preview.substr(semi + 1);
  if (!last.empty() && last.size() <= 3 &&
      last.find_first_not_of("0123456789") == std::string::npos)
    quality = std::stoi(last);
  return {format, std::min(quality, 100)};
}

Result<ViewBody> preview_encode(const Image8& src, const std::string& preview,
                                const std::string& channel) {
  auto [format, quality] = preview_parse(preview, channel);
  const bool rgb = format == "jpeg" || channel == "rgb";
  Image8 img = rgb && src.channels == 4 ? channel_pick(src, "rgb") : src;
#ifdef HEADROOM_HAVE_JPEG
  if (format == "jpeg") {
    HR_ASSIGN_OR_RETURN(std::string jpg, jpeg_encode(img, quality));
    return ViewBody{std::move(jpg), "image/jpeg"};
  }
#endif
#ifdef HEADROOM_HAVE_WEBP
  if (format == "webp") {
    HR_ASSIGN_OR_RETURN(std::string webp, webp_encode(img, quality));
    return ViewBody{std::move(webp), "image/webp"};
  }
#endif
  // A build without the encoder: a PNG, which every client shows as well.
  img.compress_level = 1;
  HR_ASSIGN_OR_RETURN(std::string png, png_encode(img));
  return ViewBody{std::move(png), "image/png"};
}

}  // namespace

bool view_has_webp() {
#ifdef HEADROOM_HAVE_WEBP
  return true;
#else
  return false;
#endif
}

bool view_has_jpeg() {
#ifdef HEADROOM_HAVE_JPEG
  return true;
#else
  return false;
#endif
}

Result<std::optional<ViewBody>> view_transform(const std::string& path,
                                               const std::optional<std::string>& preview,
                                               const std::string& channel) {
  if (!preview && (channel.empty() || channel == "rgba")) return std::optional<ViewBody>();
  if (channel != "" && channel != "rgba" && channel != "rgb" && channel != "a")
    return make_error(ErrorCode::INVALID_ARGUMENT, "channel must be rgba, rgb or a, not '{}'",
                      channel);
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (ext != ".png") return std::optional<ViewBody>();  // only PNGs are decoded; others as stored
  HR_ASSIGN_OR_RETURN(Image8 src, png_read(path));
  src.text.clear();
  if (preview) {
    HR_ASSIGN_OR_RETURN(ViewBody b, preview_encode(src, *preview, channel));
    return std::optional<ViewBody>(std::move(b));
  }
  Image8 img = channel_pick(src, channel);
  HR_ASSIGN_OR_RETURN(std::string png, png_encode(img));
  return std::optional<ViewBody>(ViewBody{std::move(png), "image/png"});
}

}  // namespace hr
