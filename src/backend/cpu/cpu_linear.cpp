// CPU LINEAR (y = x w^T + b): an OpenBLAS sgemm per batch entry (its leading dims are rows).
#include <cblas.h>

#include <climits>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

// Note [batch-invariant linear]
// Dim 0 of x is the batch (tokens [B, T, C], embeddings [B, C]), and a batch entry's rows come
// out bit for bit the same whatever else is in the batch: a sampler that runs cond and uncond
// one after the other (Note [cond/uncond split] in nodes_sampling.cpp) gives what the
// batched call gives. One sgemm over all B*T rows would not: OpenBLAS computes a row
// differently depending on where it falls in the call. Its kernels work on register tiles of
// rows whose arithmetic differs by position (the Haswell/Zen sgemm computes rows 6..11 of each
// 12-row tile unlike rows 0..5), the last rows of a call go through edge kernels, and the
// threaded driver cuts the rows into per-thread ranges with edges of their own. So with T = 77
// context tokens the first entry's last rows were computed as interior rows when batched and
// as edge rows alone: ~1e-7 relative per linear, which two euler steps at cfg 7.5 on the tiny
// SD1 UNet grew to a relative L2 of 3e-6 .. 1.6e-4 between the split and the batched run
// depending on the random test inputs (the test's bound is 3e-5). Each entry gets its own
// sgemm of the same shape instead (B calls of T rows, or B calls of one row for [B, C]), so
// its rows see the same tiles, edges and thread ranges in both runs.

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
  // One sgemm per batch entry (Note [batch-invariant linear]); BLAS dimensions are int, so an
  // entry's rows are further split into chunks that fit.
  const int64_t items = x.desc.shape.rank >= 2 ? x.desc.shape[0] : 1;
  const int64_t per_item = m / items;
  const int64_t rows_max = INT_MAX;
  for (int64_t item = 0; item < items; ++item) {
    for (int64_t r0 = item * per_item, end = r0 + per_item; r0 < end; r0 += rows_max) {
      const int64_t rows = end - r0 < rows_max ? end - r0 : rows_max;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n), int(k), 1.0f,
                  x.as<const float>() + r0 * k, int(k), w.as<const float>(), int(k),
                  bias ? 1.0f : 0.0f, y + r0 * n, int(n));
    }
  }
  return Status();
}

}  // namespace hr::cpu
