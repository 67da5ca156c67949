// image_alpha_apply: pixel loop over two 8-bit images of one size.
#include "server/image_mask.h"

namespace hr {

Result<Image8> image_alpha_apply(const Image8& original, const Image8& mask) {
  if (original.width != mask.width || original.height != mask.height)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "the mask is {}x{} but the original image is {}x{}", mask.width,
                      mask.height, original.width, original.height);
  Image8 out;
  out.width = original.width;
  out.height = original.height;
  out.channels = 4;
  out.text = original.text;
  const size_t n = size_t(out.width) * size_t(out.height);
  out.pixels.resize(n * 4);
  const size_t oc = size_t(original.channels), mc = size_t(mask.channels);
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < 3; ++c) out.pixels[i * 4 + c] = original.pixels[i * oc + c];
    out.pixels[i * 4 + 3] = mc == 4 ? mask.pixels[i * 4 + 3] : uint8_t(255);
  }
  return out;
}

}  // namespace hr
