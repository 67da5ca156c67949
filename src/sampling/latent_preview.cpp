#include "sampling/latent_preview.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace hr {

namespace {

// Note [latent2rgb factors]: each latent channel's contribution to R, G and B, fitted by the
// ComfyUI authors against the VAE's decodes (comfy/latent_formats.py), declared by each family
// as its LatentFormat (models/family.h). A C x 3 matrix product per latent pixel gives a blurry
// but recognisable preview at 1/8 of the image's size, for the price of nothing next to a
// model step.

uint8_t to_byte(float v) {  // [-1, 1] -> [0, 255], as ComfyUI's preview_to_image
  float u = std::clamp((v + 1.f) * 0.5f, 0.f, 1.f);
  return uint8_t(std::lround(u * 255.f));
}

}  // namespace

Result<PreviewMethod> preview_method_parse(std::string_view name) {
  if (name == "none") return PreviewMethod::NONE;
  if (name == "auto" || name == "latent2rgb") return PreviewMethod::LATENT2RGB;
  return make_error(ErrorCode::INVALID_ARGUMENT,
                    "preview method '{}' is not available (none, auto, latent2rgb; headroom has "
                    "no TAESD decoder)",
                    name);
}

Result<Image8> latent_preview(const HostTensor& latent, const LatentFormat& f) {
  const Shape& s = latent.shape();
  const int channels = f.channels;
  if (latent.dtype() != DType::F32 || s.rank != 4 || s[0] < 1 || s[1] != channels ||
      f.rgb_factors.size() != size_t(channels))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "latent preview needs an f32 latent [B, {}, H, W], got {}", channels,
                      latent.desc().str());
  const int64_t h = s[2], w = s[3], plane = h * w;
  Image8 img;
  img.width = int(w);
  img.height = int(h);
  img.channels = 3;
  img.compress_level = 1;
  img.pixels.resize(size_t(plane) * 3);
  const float* x = latent.f32();
  for (int64_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c) {
      float v = f.rgb_bias[size_t(c)];
      for (int k = 0; k < channels; ++k) v += x[k * plane + p] * f.rgb_factors[size_t(k)][size_t(c)];
      img.pixels[size_t(p) * 3 + size_t(c)] = to_byte(v);
    }
  return img;
}

}  // namespace hr
