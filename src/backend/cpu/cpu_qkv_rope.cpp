// CPU QKV_ROPE: the QK RMSNorm and the rotation of a DiT's fused q, k, v, stream by stream into
// the joint sequence, with RMS_NORM's and ROPE's own f32 steps (Note [fused qk norm and rope]).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

// Note [fused qk norm and rope]
// Flux's blocks (and the other DiTs' of its pattern) slice q, k and v out of a fused projection,
// RMS-normalise q and k per head (QKNorm), rotate them (RoPE) and, in a double-stream block,
// concatenate the text and image streams along the tokens. As separate ops that is four copies of
// q and k and two of v through memory; QKV_ROPE reads the projection once and writes [q | k | v]
// of the joint sequence once, and ATTENTION reads the three column windows in place. The
// arithmetic is RMS_NORM's (Note [rms norm rounding]: f32, one rounding to the dtype) followed by
// ROPE's on the rounded values (Note [rope arithmetic]), so the op equals the chain bit for bit
// on the CPU and up to the sum-of-squares order on the GPU.
namespace {

// One head's RMS norm (in place: `y` may be `x`) then its rotation by one table row.
void norm_rotate(const float* x, const float* w, const float* row_cs, int64_t d, float eps,
                 bool split, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < d; ++i) sum += double(x[i]) * double(x[i]);
  const float mean = float(sum / double(d));
  const float rstd = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < d; ++i) y[i] = (x[i] * rstd) * w[i];
  const int64_t half = d / 2, stride_p = split ? 1 : 2, second = split ? half : 1;
  for (int64_t p = 0; p < half; ++p) {
    const float co = row_cs[2 * p], si = row_cs[2 * p + 1];
    const int64_t i = p * stride_p, j = i + second;
    const float u = y[i], v = y[j];
    y[i] = co * u - si * v;
    y[j] = si * u + co * v;
  }
}

}  // namespace

Status qkv_rope(const OpCall& c) {
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i)
    if (c.inputs[i].desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu qkv_rope: dtype {} (f32 only)",
                        dtype_name(c.inputs[i].desc.dtype));
  const OpParams& p = *c.params;
  const int64_t d = p.dim, heads = p.heads, width = heads * d;
  const int64_t batch = c.output.desc.shape[0], len = c.output.desc.shape[1];
  const float* cs = c.inputs.back().as<const float>();
  float* out = c.output.as<float>();
  int64_t first = 0;  // the group's first token in the joint sequence
  for (size_t g = 0; g + 1 < c.inputs.size(); g += 3) {
    const TensorRef& x = c.inputs[g];
    const int64_t n = x.desc.shape[1], pitch = x.desc.shape[2];
    const float* gq = c.inputs[g + 1].as<const float>();
    const float* gk = c.inputs[g + 2].as<const float>();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t l = 0; l < n; ++l) {
        const float* src = x.as<const float>() + (b * n + l) * pitch;
        float* dst = out + (b * len + first + l) * 3 * width;
        const float* row_cs = cs + (first + l) * d;  // [D/2, 2] per token
        for (int64_t h = 0; h < heads; ++h) {
          norm_rotate(src + h * d, gq, row_cs, d, p.eps, p.rope_half_split, dst + h * d);
          norm_rotate(src + width + h * d, gk, row_cs, d, p.eps, p.rope_half_split,
                      dst + width + h * d);
        }
        std::memcpy(dst + 2 * width, src + 2 * width, size_t(width) * sizeof(float));
      }
    first += n;
  }
  return Status();
}

}  // namespace hr::cpu
