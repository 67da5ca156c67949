// Naive float64 reference implementations of every op, written straight from Note [op semantics]
// in backend/op.h. They are the oracle of the op-test harness: slow, obvious, independent of the
// kernels.
#pragma once

#include <span>
#include <vector>

#include "backend/op.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr::test {

// A tensor as float64 values; desc.dtype says how the values are stored on a backend
// (the values are exactly representable in it).
struct RefTensor {
  TensorDesc desc;
  std::vector<double> data;
};

// Output of `kind` on `inputs`, computed in double. The output shape is derived here,
// independently of op_infer, so a wrong op_infer shows up as a shape mismatch. Returns
// INVALID_ARGUMENT for inputs the op rejects (e.g. an embedding id outside the table).
// Outputs are not rounded to the output dtype, except for CAST, whose meaning is the rounding.
Result<RefTensor> op_reference(OpKind kind, const OpParams& params,
                               std::span<const RefTensor> inputs);

// x as stored in dtype t: round-to-nearest-even for floats, truncation toward zero for integers.
double dtype_round(double x, DType t);

// Scalar conversions between stored bytes (compute dtypes) and double.
double dtype_load(const void* data, DType t, size_t i);
void dtype_store(void* data, DType t, size_t i, double x);

}  // namespace hr::test
