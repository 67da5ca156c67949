// CPU RMS_NORM: the sum of squares of a row accumulated in double, then y = (x * rstd) * gamma
// in f32, as Note [rms norm rounding] says.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

// Note [rms norm rounding]
// ComfyUI's rms_norm (comfy/rmsnorm.py, used by Flux's QKNorm in comfy/ldm/flux/layers.py and by
// the Llama/Qwen text encoders) calls torch's F.rms_norm with the weight cast to x's dtype;
// T5LayerNorm (comfy/text_encoders/t5.py) spells out x * rsqrt(mean(x^2) + eps) * weight, in the
// dtype of x, which ComfyUI's T5 keeps in f32. F.rms_norm (torch's rms_norm_composite and its
// fused kernel) upcasts 16-bit x to f32, computes rstd = rsqrt(mean(x^2) + eps) in f32,
// multiplies x * rstd and then by the weight in f32 and rounds once to x's dtype. RMS_NORM does
// exactly that on every backend:
//   f32        y = (x * rstd) * w, each product rounded to f32: the same two roundings as
//              F.rms_norm and as T5LayerNorm's formula; only the order of the sum of squares
//              differs (here double, on CUDA f32 partial sums), a few ulp at most.
//   f16, bf16  the same f32 arithmetic on the widened inputs, then one rounding to the dtype:
//              torch's F.rms_norm of current releases. (Older releases' composite rounded x * rstd
//              to the input dtype before the weight product; ComfyUI's fallback formula for torch
//              without F.rms_norm rounds every step to the input dtype. Both differ from this by
//              about one ulp of the 16-bit dtype.)
// eps is ComfyUI's per call site: 1e-6 for Flux's QK norm and T5, the config's for Llama/Qwen.
Status rms_norm(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu rms_norm: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  const int64_t width = c.inputs[0].desc.shape[-1];
  if (width == 0) return Status();
  const int64_t rows = c.inputs[0].desc.numel() / width;
  const float* x = c.inputs[0].as<const float>();
  const float* w = c.inputs.size() > 1 ? c.inputs[1].as<const float>() : nullptr;
  float* y = c.output.as<float>();
  const float eps = c.params->eps;

#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* yr = y + r * width;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += double(xr[i]) * double(xr[i]);
    const float mean = float(sum / double(width));
    const float rstd = 1.0f / std::sqrt(mean + eps);
    if (w) {
      for (int64_t i = 0; i < width; ++i) yr[i] = (xr[i] * rstd) * w[i];
    } else {
      for (int64_t i = 0; i < width; ++i) yr[i] = xr[i] * rstd;
    }
  }
  return Status();
}

}  // namespace hr::cpu
