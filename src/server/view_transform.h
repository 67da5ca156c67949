// GET /view's preview= and channel= parameters (ComfyUI): a stored PNG re-encoded for a
// thumbnail (WebP or JPEG at a quality) or reduced to its colour or alpha channels.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace hr {

struct ViewBody {
  std::string bytes;
  std::string mime;  // "image/webp", "image/jpeg", "image/png"
};

// nullopt: serve the file as stored (no preview, channel rgba or absent). `preview` is
// ComfyUI's "format;quality" ("webp;90", "jpeg;50"; other formats become webp), `channel` is
// "rgba", "rgb" or "a". An error names what failed (a file that is not a PNG).
Result<std::optional<ViewBody>> view_transform(const std::string& path,
                                               const std::optional<std::string>& preview,
                                               const std::string& channel);

// Whether this build encodes WebP and JPEG (libwebp, libjpeg); without them previews are PNG.
bool view_has_webp();
bool view_has_jpeg();

}  // namespace hr
