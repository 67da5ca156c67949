// PNG reading and writing for image nodes and the server: 8-bit RGB/RGBA, tEXt chunks (ComfyUI stores the
// API prompt under "prompt"), atomic writes (temporary name, then rename).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hr {

struct Image8 {
  int width = 0, height = 0, channels = 3;  // 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;              // row-major, interleaved
  std::vector<std::pair<std::string, std::string>> text;  // tEXt chunks
  int compress_level = 4;  // zlib level on write (ComfyUI: SaveImage 4, PreviewImage 1)
};

Status png_write(const std::string& path, const Image8& img);
Result<std::string> png_encode(const Image8& img);  // the PNG file's bytes
Result<Image8> png_read(const std::string& path);

// ComfyUI's output naming: "<prefix>_<counter:05>_.png" with the counter one past the largest
// existing one for this prefix in `dir` (prefix may contain subfolders).
std::string png_next_name(const std::string& dir, const std::string& prefix);
// Writes `img` under png_next_name, never replacing a file another process wrote meanwhile
// (Note [no overwrite]); the path it took.
Result<std::string> png_write_next(const std::string& dir, const std::string& prefix,
                                   const Image8& img);

}  // namespace hr
