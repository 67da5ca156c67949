// CPU ROPE: rotates the interleaved (2p, 2p+1) or half-split (p, p + D/2) pairs of each head's
// vector by a cos/sin table, in f32 with the rounding steps of ComfyUI's code (Note [rope
// arithmetic]).
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

// Note [rope arithmetic]
// Both reference forms compute in f32 whatever x's dtype, and round once to x's dtype at the end:
// - Flux (comfy/ldm/flux/math.py `attention`, which its double and single blocks call): x is cast
//   to the f32 table's dtype, viewed as pairs (x0, x1) = (x[2p], x[2p+1]), and multiplied by the
//   2x2 rotation matrices `rope()` builds, [[cos, -sin], [sin, cos]]:
//     out[2p] = cos * x0 + (-sin) * x1,   out[2p+1] = sin * x0 + cos * x1
//   each product rounded to f32, then the sum; `.type_as(v)` then rounds to the compute dtype.
// - Llama/Qwen (comfy/text_encoders/llama.py `apply_rope`): (x * cos) + (rotate_half(x) * sin)
//   with x in its dtype and cos/sin f32 (so the products promote to f32), rotate_half(x) =
//   cat(-x[D/2:], x[:D/2]); cos and sin repeat per half (cat(freqs, freqs)), so pair p is
//   (x[p], x[p + D/2]) with one angle:
//     out[p] = x[p] * cos + (-x[p + D/2]) * sin,   out[p + D/2] = x[p + D/2] * cos + x[p] * sin
// Negating is exact, so c*u - s*v with both products rounded equals both forms bit for bit
// (tests/models/transformer_ops_golden_test.cpp checks it on ComfyUI's outputs); the CPU build
// does not contract a*b + c into an FMA (ISO C++ mode: -ffp-contract=off) and the CUDA kernel uses
// __fmul_rn / __fadd_rn, so f32 results agree across backends exactly. ComfyUI's other form,
// flux/math.py `apply_rope1` (Wan, HiDream), adds the second product with addcmul_, which torch
// runs as a fused multiply-add: it differs from this in the last f32 bit of ~10 % of elements.
Status rope(const OpCall& c) {
  if (c.inputs[0].desc.dtype != DType::F32)
    return make_error(ErrorCode::UNSUPPORTED, "cpu rope: dtype {} (f32 only)",
                      dtype_name(c.inputs[0].desc.dtype));
  const Shape& xs = c.inputs[0].desc.shape;
  const int64_t batch = xs[0], len = xs[1], heads = xs[2], d = xs[3], half = d / 2;
  const bool per_batch = c.inputs[1].desc.shape.rank == 4;
  const bool split = c.params->rope_half_split;
  const float* x = c.inputs[0].as<const float>();
  const float* cs = c.inputs[1].as<const float>();
  float* y = c.output.as<float>();
  // Pair p's elements: (2p, 2p+1) or (p, p + D/2).
  const int64_t stride_p = split ? 1 : 2, second = split ? half : 1;

#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t l = 0; l < len; ++l) {
      const float* row_cs = cs + ((per_batch ? b * len : 0) + l) * half * 2;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = ((b * len + l) * heads + h) * d;
        for (int64_t p = 0; p < half; ++p) {
          const float co = row_cs[2 * p], si = row_cs[2 * p + 1];
          const int64_t i = base + p * stride_p, j = i + second;
          const float u = x[i], v = x[j];
          y[i] = co * u - si * v;
          y[j] = si * u + co * v;
        }
      }
    }
  return Status();
}

}  // namespace hr::cpu
