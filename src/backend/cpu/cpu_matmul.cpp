// CPU MATMUL: batched sgemm with NumPy broadcasting of the batch dims and optional b^T.
#include <cblas.h>

#include <climits>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {

Status matmul(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu matmul: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  const bool tb = c.params->trans_b;
  const Shape& as = c.inputs[0].desc.shape;
  const Shape& bs = c.inputs[1].desc.shape;
  const Shape& os = c.output.desc.shape;
  const int64_t m = as[-2], k = as[-1], n = tb ? bs[-2] : bs[-1];
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return make_error(ErrorCode::UNSUPPORTED, "cpu matmul: {} x {} too large for BLAS", as.str(),
                      bs.str());
  const float* a = c.inputs[0].as<const float>();
  const float* b = c.inputs[1].as<const float>();
  float* y = c.output.as<float>();
  const int batch_rank = os.rank - 2;
  const int64_t batches = os.prod(0, batch_rank);
  if (batches == 0 || m == 0 || n == 0) return Status();
  if (k == 0) {
    std::memset(y, 0, c.output.desc.bytes());
    return Status();
  }

  // Element strides of each operand's matrices per output batch dim (0 where broadcast).
  int64_t a_stride[kMaxDims] = {}, b_stride[kMaxDims] = {};
  int64_t sa = m * k, sb = k * n;
  bool b_broadcast = true;  // every batch uses the same b matrix
  for (int i = batch_rank - 1; i >= 0; --i) {
    int ia = i - (batch_rank - (as.rank - 2)), ib = i - (batch_rank - (bs.rank - 2));
    int64_t da = ia >= 0 ? as.dims[ia] : 1, db = ib >= 0 ? bs.dims[ib] : 1;
    a_stride[i] = da == 1 ? 0 : sa;
    b_stride[i] = db == 1 ? 0 : sb;
    if (db != 1) b_broadcast = false;
    sa *= da;
    sb *= db;
  }
  const CBLAS_TRANSPOSE tr_b = tb ? CblasTrans : CblasNoTrans;
  const int ldb = int(tb ? k : n);

  // A shared b with a non-broadcast a is one tall sgemm per entry of dim 0 (the batch, Note
  // [batch-invariant linear] in cpu_linear.cpp): a's other batches are consecutive rows.
  bool a_full = true;
  for (int i = 0; i < batch_rank; ++i)
    if (os.dims[i] != 1 && a_stride[i] == 0) a_full = false;
  const int64_t items = batch_rank > 0 ? os.dims[0] : 1, rows = batches / items * m;
  if (b_broadcast && a_full && rows <= INT_MAX) {
    for (int64_t item = 0; item < items; ++item)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, tr_b, int(rows), int(n), int(k), 1.0f,
                  a + item * rows * k, int(k), b, ldb, 0.0f, y + item * rows * n, int(n));
    return Status();
  }
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (int i = batch_rank - 1; i >= 0; --i) {
      int64_t idx = rem % os.dims[i];
      rem /= os.dims[i];
      oa += idx * a_stride[i];
      ob += idx * b_stride[i];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tr_b, int(m), int(n), int(k), 1.0f, a + oa, int(k),
                b + ob, ldb, 0.0f, y + bi * m * n, int(n));
  }
  return Status();
}

}  // namespace hr::cpu
