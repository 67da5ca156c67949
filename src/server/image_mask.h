// The compositing of ComfyUI's POST /upload/mask: a mask's alpha channel becomes an image's alpha.
#pragma once

#include "core/status.h"
#include "core/png_io.h"

namespace hr {

// `original` as RGBA with the alpha of `mask` (PIL's putalpha(mask.getchannel("A")) after
// convert("RGBA"): an RGB mask has alpha 255 everywhere). The original's text chunks are kept.
// INVALID_ARGUMENT when the sizes differ.
Result<Image8> image_alpha_apply(const Image8& original, const Image8& mask);

}  // namespace hr
