// CPU EMBEDDING (row gather with an id range check) and TIMESTEP_EMBEDDING (sinusoidal
// features computed in f32 in the same order of operations as PyTorch/ComfyUI).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {
namespace {

template <typename Id>
Status gather_rows(const Id* ids, int64_t n, const uint8_t* table, int64_t vocab,
                   size_t row_bytes, uint8_t* out) {
  // Validate first so a bad id leaves the output untouched rather than half written.
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || int64_t(ids[i]) >= vocab)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "embedding: id {} at position {} is outside the table of {} rows",
                        int64_t(ids[i]), i, vocab);
  }
#pragma omp parallel for if (int64_t(row_bytes) * n >= (1 << 18)) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + size_t(i) * row_bytes, table + size_t(ids[i]) * row_bytes, row_bytes);
  return Status();
}

}  // namespace

Status embedding(const OpCall& c) {
  if (c.inputs.size() != 2)
    return make_error(ErrorCode::INVALID_ARGUMENT, "embedding: expects 2 inputs, got {}",
                      c.inputs.size());
  const TensorDesc& ids = c.inputs[0].desc;
  const TensorDesc& table = c.inputs[1].desc;
  const TensorDesc& od = c.output.desc;
  if (table.dtype != DType::F32 && table.dtype != DType::F16 && table.dtype != DType::BF16)
    return make_error(ErrorCode::UNSUPPORTED, "cpu embedding: table dtype {} (want f32/f16/bf16)",
                      dtype_name(table.dtype));
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64)
    return make_error(ErrorCode::INVALID_ARGUMENT, "embedding: ids must be i32 or i64, got {}",
                      dtype_name(ids.dtype));
  if (table.shape.rank != 2 || od.dtype != table.dtype ||
      od.numel() != ids.numel() * table.shape[1])
    return make_error(ErrorCode::INVALID_ARGUMENT, "embedding: ids {}, table {} -> {} mismatch",
                      ids.str(), table.str(), od.str());
  const int64_t vocab = table.shape[0];
  const size_t row_bytes = size_t(table.shape[1]) * dtype_size(table.dtype);
  const uint8_t* t = c.inputs[1].as<const uint8_t>();
  uint8_t* out = c.output.as<uint8_t>();
  if (ids.dtype == DType::I32)
    return gather_rows(c.inputs[0].as<const int32_t>(), ids.numel(), t, vocab, row_bytes, out);
  return gather_rows(c.inputs[0].as<const int64_t>(), ids.numel(), t, vocab, row_bytes, out);
}

Status timestep_embedding(const OpCall& c) {
  if (c.inputs.size() != 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "timestep_embedding: expects 1 input, got {}",
                      c.inputs.size());
  const OpParams p = c.params ? *c.params : OpParams();
  const TensorDesc& td = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  if (td.dtype != DType::F32 || td.shape.rank != 1 || p.dim < 2 || od.shape.rank != 2 ||
      od.shape[0] != td.shape[0] || od.shape[1] != p.dim)
    return make_error(ErrorCode::INVALID_ARGUMENT, "timestep_embedding: {} -> {} with dim {}",
                      td.str(), od.str(), p.dim);
  if (od.dtype != DType::F32 && od.dtype != DType::F16 && od.dtype != DType::BF16)
    return make_error(ErrorCode::UNSUPPORTED, "timestep_embedding: output dtype {}",
                      dtype_name(od.dtype));
  const int64_t n = td.shape[0], dim = p.dim, half = dim / 2;
  // PyTorch: exp(-math.log(max_period) * arange(half, float32) / (half - shift)). The Python
  // scalars are doubles rounded to f32 when they meet the f32 tensor, and the product is
  // rounded before the division, so each step rounds to f32 here too.
  const float neg_log = float(-std::log(double(p.max_period)));
  const float denom = float(double(half) - double(p.freq_shift));
  std::vector<float> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = neg_log * float(i);
    freqs[size_t(i)] = std::exp(e / denom);
  }
  const float* t = c.inputs[0].as<const float>();
  std::vector<float> row(static_cast<size_t>(dim));
  const size_t out_row = size_t(dim) * dtype_size(od.dtype);
  uint8_t* out = c.output.as<uint8_t>();
  for (int64_t r = 0; r < n; ++r) {
    float* first = row.data();
    float* second = row.data() + half;
    for (int64_t i = 0; i < half; ++i) {
      const float arg = t[r] * freqs[size_t(i)];
      const float cs = std::cos(arg), sn = std::sin(arg);
      first[i] = p.flip_sin_to_cos ? cs : sn;
      second[i] = p.flip_sin_to_cos ? sn : cs;
    }
    if (dim % 2) row[size_t(dim - 1)] = 0.0f;
    dtype_convert(row.data(), DType::F32, out + size_t(r) * out_row, od.dtype, size_t(dim));
  }
  return Status();
}

}  // namespace hr::cpu
