// CPU elementwise activations: GELU (erf and tanh forms), QUICK_GELU, SILU, TANH, SCALE, and the
// gated GEGLU. f32 only; large tensors are split across OpenMP threads.
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * float(M_SQRT1_2))); }

inline float gelu_tanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

// x * sigmoid(k x) written as x / (1 + exp(-k x)): for very negative x the exp overflows to
// inf and the result is -0, never NaN.
inline float x_sigmoid(float x, float k) { return x / (1.0f + std::exp(-k * x)); }

template <typename F>
void map(const float* x, float* y, int64_t n, F f) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

Status check_f32(const OpCall& c) {
  if (c.inputs.size() != 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: expects 1 input, got {}",
                      op_name(c.kind), c.inputs.size());
  if (c.inputs[0].desc.dtype != DType::F32 || c.output.desc.dtype != DType::F32)
    return make_error(ErrorCode::UNSUPPORTED, "cpu {}: only f32 is supported, got {}",
                      op_name(c.kind), dtype_name(c.inputs[0].desc.dtype));
  return Status();
}

}  // namespace

Status unary(const OpCall& c) {
  HR_TRY(check_f32(c));
  const float* x = c.inputs[0].as<const float>();
  float* y = c.output.as<float>();
  int64_t n = c.output.desc.numel();
  if (c.inputs[0].desc.numel() != n)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: input {} and output {} differ",
                      op_name(c.kind), c.inputs[0].desc.str(), c.output.desc.str());
  switch (c.kind) {
    case OpKind::GELU: map(x, y, n, gelu_erf); break;
    case OpKind::GELU_TANH: map(x, y, n, gelu_tanh); break;
    case OpKind::QUICK_GELU: map(x, y, n, [](float v) { return x_sigmoid(v, 1.702f); }); break;
    case OpKind::SILU: map(x, y, n, [](float v) { return x_sigmoid(v, 1.0f); }); break;
    case OpKind::TANH: map(x, y, n, [](float v) { return std::tanh(v); }); break;
    case OpKind::SCALE: {
      float a = c.params ? c.params->alpha : 0.0f, b = c.params ? c.params->beta : 0.0f;
      map(x, y, n, [a, b](float v) { return v * a + b; });
      break;
    }
    default:
      return make_error(ErrorCode::INTERNAL, "cpu unary: {} is not a unary op", op_name(c.kind));
  }
  return Status();
}

Status geglu(const OpCall& c) {
  HR_TRY(check_f32(c));
  const TensorDesc& in = c.inputs[0].desc;
  if (in.shape.rank < 1 || in.shape[-1] % 2 != 0 || in.numel() != 2 * c.output.desc.numel())
    return make_error(ErrorCode::INVALID_ARGUMENT, "geglu: input {} does not fit output {}",
                      in.str(), c.output.desc.str());
  const int64_t n = in.shape[-1] / 2;
  const int64_t rows = n ? c.output.desc.numel() / n : 0;
  const float* x = c.inputs[0].as<const float>();
  float* y = c.output.as<float>();
#pragma omp parallel for if (rows * n >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* value = x + r * 2 * n;
    const float* gate = value + n;
    float* out = y + r * n;
    for (int64_t i = 0; i < n; ++i) out[i] = value[i] * gelu_erf(gate[i]);
  }
  return Status();
}

}  // namespace hr::cpu
