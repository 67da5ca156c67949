#include "sampling/latent_preview.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace hr {

namespace {

// Note [latent2rgb factors]: each latent channel's contribution to R, G and B, fitted by the
// ComfyUI authors against the VAE's decodes (comfy/latent_formats.py: SD15 for SD1/SD2, SDXL
// with a bias). A 4x3 matrix product per latent pixel gives a blurry but recognisable preview
// at 1/8 of the image's size, for the price of nothing next to a UNet step.
struct RgbFactors {
  std::array<std::array<float, 3>, 4> w;
  std::array<float, 3> bias;
};

constexpr RgbFactors kSd15{{{{0.3512f, 0.2297f, 0.3227f},
                             {0.3250f, 0.4974f, 0.2350f},
                             {-0.2829f, 0.1762f, 0.2721f},
                             {-0.2120f, -0.2616f, -0.7177f}}},
                           {0.f, 0.f, 0.f}};
constexpr RgbFactors kSdxl{{{{0.3651f, 0.4232f, 0.4341f},
                             {-0.2533f, -0.0042f, 0.1068f},
                             {0.1076f, 0.1111f, -0.0362f},
                             {-0.3165f, -0.2492f, -0.2188f}}},
                           {0.1084f, -0.0175f, -0.0011f}};

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

Result<Image8> latent_preview(const HostTensor& latent, ModelFamily family) {
  const Shape& s = latent.shape();
  if (latent.dtype() != DType::F32 || s.rank != 4 || s[0] < 1 || s[1] != 4)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "latent preview needs an f32 latent [B, 4, H, W], got {}", latent.desc().str());
  const RgbFactors& f = family == ModelFamily::SDXL ? kSdxl : kSd15;
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
      float v = f.bias[size_t(c)];
      for (int k = 0; k < 4; ++k) v += x[k * plane + p] * f.w[size_t(k)][size_t(c)];
      img.pixels[size_t(p) * 3 + size_t(c)] = to_byte(v);
    }
  return img;
}

}  // namespace hr
