// CPU LINEAR_FP8 (op.h), the reference of the fp8 GEMM: both operands widened to f32 exactly,
// the f32 LINEAR's sgemm (each product of two fp8 values is exact in f32), then the weight's
// scale and the bias in f32 and one rounding to the output dtype.
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {
namespace {

std::vector<float> widened(const TensorRef& t) {
  std::vector<float> v(size_t(t.desc.numel()));
  dtype_convert(t.data, t.desc.dtype, v.data(), DType::F32, v.size());
  return v;
}

}  // namespace

Status linear_fp8(const OpCall& c) {
  const OpParams p = c.params ? *c.params : OpParams();
  const TensorRef& x = c.inputs[0];
  const TensorRef& w = c.inputs[1];
  std::vector<float> xf = widened(x), wf = widened(w);
  std::vector<float> y(size_t(c.output.desc.numel()));
  const TensorRef f32_in[] = {{TensorDesc{DType::F32, x.desc.shape}, xf.data()},
                              {TensorDesc{DType::F32, w.desc.shape}, wf.data()}};
  OpCall mm{OpKind::LINEAR, nullptr, f32_in,
            TensorRef{TensorDesc{DType::F32, c.output.desc.shape}, y.data()}};
  HR_TRY(linear(mm));
  const float scale = p.weight_scale ? *c.inputs[2].as<const float>() : 1.0f;
  const size_t fixed = (p.weight_scale ? 3u : 2u) + (p.add_input ? 1u : 0u);
  const std::vector<float> bias =
      c.inputs.size() > fixed ? widened(c.inputs[fixed - (p.add_input ? 1 : 0)]) : std::vector<float>();
  const std::vector<float> added = p.add_input ? widened(c.inputs.back()) : std::vector<float>();
  const size_t n = size_t(w.desc.shape[0]);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = y[i] * scale + (bias.empty() ? 0.0f : bias[i % n]) + (added.empty() ? 0.0f : added[i]);
  dtype_convert(y.data(), DType::F32, c.output.data, c.output.desc.dtype, y.size());
  return Status();
}

}  // namespace hr::cpu
