// CPU LINEAR (y = x w^T + b): all leading dims of x fold into the rows of one OpenBLAS sgemm.
#include <cblas.h>

#include <climits>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

Status linear(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu linear: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  const TensorRef& x = c.inputs[0];
  const TensorRef& w = c.inputs[1];
  const float* bias = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  const int64_t n = w.desc.shape[0], k = w.desc.shape[1];
  const int64_t m = k > 0 ? x.desc.numel() / k : c.output.desc.numel() / (n > 0 ? n : 1);
  if (n > INT_MAX || k > INT_MAX)
    return make_error(ErrorCode::UNSUPPORTED, "cpu linear: weight {} too large for BLAS",
                      w.desc.shape.str());
  float* y = c.output.as<float>();
  if (m == 0 || n == 0) return Status();

  // The bias goes into y first so sgemm can accumulate onto it (beta = 1) in one pass.
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * n, bias, size_t(n) * sizeof(float));
  }
  if (k == 0) {
    if (!bias) std::memset(y, 0, size_t(m * n) * sizeof(float));
    return Status();
  }
  // BLAS dimensions are int: split the rows into chunks that fit.
  const int64_t rows_max = INT_MAX;
  for (int64_t r0 = 0; r0 < m; r0 += rows_max) {
    const int64_t rows = m - r0 < rows_max ? m - r0 : rows_max;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n), int(k), 1.0f,
                x.as<const float>() + r0 * k, int(k), w.as<const float>(), int(k),
                bias ? 1.0f : 0.0f, y + r0 * n, int(n));
  }
  return Status();
}

}  // namespace hr::cpu
