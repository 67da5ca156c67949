// Cropping a padded latent back to its size.
#include "models/latent_crop.h"

#include <cstring>

namespace hr {

HostTensor latent_crop(HostTensor x, int64_t h, int64_t w) {
  const Shape& s = x.shape();
  const int64_t bc = s[0] * s[1], hp = s[2], wp = s[3];
  if (hp == h && wp == w) return x;
  HostTensor out(DType::F32, Shape{s[0], s[1], h, w});
  for (int64_t p = 0; p < bc; ++p)
    for (int64_t y = 0; y < h; ++y)
      std::memcpy(out.f32() + (p * h + y) * w, x.f32() + (p * hp + y) * wp,
                  size_t(w) * sizeof(float));
  return out;
}

}  // namespace hr
