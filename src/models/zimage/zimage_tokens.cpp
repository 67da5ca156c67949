// Z-Image's patchify/unpatchify (Note [z-image patches]) and its position table (Note [z-image
// positions]).
#include "models/zimage/zimage_tokens.h"

#include <vector>

#include "models/rope_table.h"

namespace hr {

namespace {

// Offset of the element at patch offset (py, px), channel c, inside a token of width 4 C.
int64_t patch_column(int64_t py, int64_t px, int64_t c, int64_t channels) {
  return (py * 2 + px) * channels + c;
}

}  // namespace

Result<HostTensor> zimage_patchify(const HostTensor& latent) {
  const Shape& s = latent.shape();
  if (s.rank != 4 || latent.dtype() != DType::F32 || s[2] < 1 || s[3] < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_patchify: latent {} must be f32 [B, C, H, W]", latent.desc().str());
  const int64_t b = s[0], ch = s[1], h = s[2], w = s[3];
  const int64_t ht = (h + 1) / 2, wt = (w + 1) / 2, width = 4 * ch;
  HostTensor out(DType::F32, Shape{b, ht * wt, width});
  const float* x = latent.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t ty = 0; ty < ht; ++ty)
      for (int64_t tx = 0; tx < wt; ++tx) {
        float* token = o + ((i * ht + ty) * wt + tx) * width;
        for (int64_t py = 0; py < 2; ++py)
          for (int64_t px = 0; px < 2; ++px) {
            // pad_to_patch_size: the padded row / column repeats the first (circular).
            const int64_t y = (2 * ty + py) % h, xx = (2 * tx + px) % w;
            for (int64_t c = 0; c < ch; ++c)
              token[patch_column(py, px, c, ch)] = x[((i * ch + c) * h + y) * w + xx];
          }
      }
  return out;
}

Result<HostTensor> zimage_unpatchify(const HostTensor& tokens, int64_t channels, int64_t h_tokens,
                                     int64_t w_tokens) {
  const Shape& s = tokens.shape();
  if (s.rank != 3 || tokens.dtype() != DType::F32 || s[1] != h_tokens * w_tokens ||
      s[2] != channels * 4)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_unpatchify: tokens {} do not hold a {}-channel {}x{}-token latent",
                      tokens.desc().str(), channels, h_tokens, w_tokens);
  const int64_t b = s[0], h = 2 * h_tokens, w = 2 * w_tokens, width = 4 * channels;
  HostTensor out(DType::F32, Shape{b, channels, h, w});
  for (int64_t i = 0; i < b; ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t token = (i * h_tokens + y / 2) * w_tokens + x / 2;
          out.f32()[((i * channels + c) * h + y) * w + x] =
              tokens.f32()[token * width + patch_column(y % 2, x % 2, c, channels)];
        }
  return out;
}

int64_t zimage_padded_len(int64_t n, int multiple) {
  return multiple > 1 ? (n + multiple - 1) / multiple * multiple : n;
}

Result<HostTensor> zimage_pe_table(int64_t cap_tokens, int64_t h_tokens, int64_t w_tokens,
                                   int pad_multiple, std::span<const int> axes_dim, double theta) {
  if (axes_dim.size() != 3 || cap_tokens < 1 || h_tokens < 1 || w_tokens < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_pe_table: needs 3 axes, a caption and an image ({} axes, {} caption "
                      "tokens, {}x{} image tokens)",
                      axes_dim.size(), cap_tokens, h_tokens, w_tokens);
  const int64_t lc = zimage_padded_len(cap_tokens, pad_multiple);
  const int64_t li = zimage_padded_len(h_tokens * w_tokens, pad_multiple);
  std::vector<float> ids(size_t((lc + li) * 3), 0.0f);  // pads not set below stay (0, 0, 0)
  for (int64_t i = 0; i < lc; ++i) ids[size_t(i * 3)] = float(1 + i);
  size_t at = size_t(lc * 3);
  for (int64_t r = 0; r < h_tokens; ++r)
    for (int64_t c = 0; c < w_tokens; ++c, at += 3) {
      ids[at] = float(lc + 1);
      ids[at + 1] = float(r);
      ids[at + 2] = float(c);
    }
  return rope_table_flux(ids, axes_dim, theta);
}

}  // namespace hr
