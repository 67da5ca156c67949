// Flux's patchify/unpatchify (Note [flux patches]) and its position table.
#include "models/flux/flux_tokens.h"

#include <vector>

#include "models/rope_table.h"

namespace hr {

namespace {

// Index of element (b, c, y, x) of a [B, C, H, W] latent in the token tensor.
int64_t token_index(int64_t b, int64_t c, int64_t y, int64_t x, int64_t ch, int64_t h,
                    int64_t w) {
  const int64_t wt = w / 2, tokens = (h / 2) * wt, width = ch * 4;
  const int64_t token = (y / 2) * wt + x / 2;
  const int64_t col = c * 4 + (y % 2) * 2 + x % 2;
  return (b * tokens + token) * width + col;
}

}  // namespace

Result<HostTensor> flux_patchify(const HostTensor& latent) {
  const Shape& s = latent.shape();
  if (s.rank != 4 || latent.dtype() != DType::F32 || s[2] % 2 || s[3] % 2)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_patchify: latent {} must be f32 [B, C, H, W] with H and W even",
                      latent.desc().str());
  const int64_t b = s[0], ch = s[1], h = s[2], w = s[3];
  HostTensor out(DType::F32, Shape{b, (h / 2) * (w / 2), ch * 4});
  const float* x = latent.f32();
  for (int64_t i = 0, n = 0; i < b; ++i)
    for (int64_t c = 0; c < ch; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx, ++n) out.f32()[token_index(i, c, y, xx, ch, h, w)] = x[n];
  return out;
}

Result<HostTensor> flux_unpatchify(const HostTensor& tokens, int64_t channels, int64_t height,
                                   int64_t width) {
  const Shape& s = tokens.shape();
  if (s.rank != 3 || tokens.dtype() != DType::F32 || height % 2 || width % 2 ||
      s[1] != (height / 2) * (width / 2) || s[2] != channels * 4)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_unpatchify: tokens {} do not hold a {}-channel {}x{} latent",
                      tokens.desc().str(), channels, height, width);
  const int64_t b = s[0];
  HostTensor out(DType::F32, Shape{b, channels, height, width});
  for (int64_t i = 0, n = 0; i < b; ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x, ++n)
          out.f32()[n] = tokens.f32()[token_index(i, c, y, x, channels, height, width)];
  return out;
}

Result<HostTensor> flux_pe_table(int64_t txt_tokens, int64_t h_tokens, int64_t w_tokens,
                                 std::span<const int> axes_dim, double theta) {
  if (axes_dim.size() != 3 || txt_tokens < 0 || h_tokens < 1 || w_tokens < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_pe_table: needs 3 axes and a non-empty grid ({} axes, {}x{})",
                      axes_dim.size(), h_tokens, w_tokens);
  std::vector<float> ids(size_t((txt_tokens + h_tokens * w_tokens) * 3), 0.0f);
  size_t at = size_t(txt_tokens * 3);
  for (int64_t r = 0; r < h_tokens; ++r)
    for (int64_t c = 0; c < w_tokens; ++c, at += 3) {
      ids[at + 1] = float(r);
      ids[at + 2] = float(c);
    }
  return rope_table_flux(ids, axes_dim, theta);
}

}  // namespace hr
