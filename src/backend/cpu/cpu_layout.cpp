// CPU data-movement ops for any dtype: CONCAT, SLICE, PERMUTE, UPSAMPLE_NEAREST, and CAST
// (which also serves RESHAPE and COPY). Everything is byte copies except CAST's conversion.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "core/fp8_round.h"

namespace hr::cpu {
namespace {

// Bytes below which a parallel region costs more than it saves.
constexpr int64_t kParallelMinBytes = 1 << 18;

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

Status need_inputs(const OpCall& c, size_t n) {
  if (c.inputs.size() < n)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: expects {} input(s), got {}",
                      op_name(c.kind), n, c.inputs.size());
  return Status();
}

// Elements of size 1, 2, 4 or 8 bytes move as one integer of that width.
template <typename T>
void gather_row(const uint8_t* src, int64_t stride, uint8_t* dst, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = s[i * stride];
}

void gather_row_any(size_t esize, const uint8_t* src, int64_t stride, uint8_t* dst, int64_t n) {
  switch (esize) {
    case 1: return gather_row<uint8_t>(src, stride, dst, n);
    case 2: return gather_row<uint16_t>(src, stride, dst, n);
    case 4: return gather_row<uint32_t>(src, stride, dst, n);
    case 8: return gather_row<uint64_t>(src, stride, dst, n);
    default:
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + size_t(i) * esize, src + size_t(i * stride) * esize, esize);
  }
}

}  // namespace

Status concat(const OpCall& c) {
  HR_TRY(need_inputs(c, 2));
  const TensorDesc& od = c.output.desc;
  const int axis = norm_axis(c.params ? c.params->axis : 0, od.shape.rank);
  if (axis < 0 || axis >= od.shape.rank)
    return make_error(ErrorCode::INVALID_ARGUMENT, "concat: axis out of range for {}", od.str());
  const size_t esize = dtype_size(od.dtype);
  const int64_t outer = od.shape.prod(0, axis);
  const int64_t inner = od.shape.prod(axis + 1, od.shape.rank);
  const size_t out_row = size_t(od.shape.dims[axis] * inner) * esize;
  int64_t axis_sum = 0;
  for (const TensorRef& in : c.inputs) {
    if (in.desc.dtype != od.dtype || in.desc.shape.rank != od.shape.rank)
      return make_error(ErrorCode::INVALID_ARGUMENT, "concat: input {} does not match output {}",
                        in.desc.str(), od.str());
    axis_sum += in.desc.shape.dims[axis];
  }
  if (axis_sum != od.shape.dims[axis])
    return make_error(ErrorCode::INVALID_ARGUMENT, "concat: inputs sum to {} along axis {}, output {}",
                      axis_sum, axis, od.str());
  uint8_t* out = c.output.as<uint8_t>();
  size_t offset = 0;  // byte offset of this input's block inside one output row
  for (const TensorRef& in : c.inputs) {
    const size_t in_row = size_t(in.desc.shape.dims[axis] * inner) * esize;
    const uint8_t* src = in.as<const uint8_t>();
#pragma omp parallel for if (int64_t(in_row) * outer >= kParallelMinBytes) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out + size_t(o) * out_row + offset, src + size_t(o) * in_row, in_row);
    offset += in_row;
  }
  return Status();
}

Status slice(const OpCall& c) {
  HR_TRY(need_inputs(c, 1));
  const TensorDesc& id = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  const OpParams p = c.params ? *c.params : OpParams();
  const int axis = norm_axis(p.axis, id.shape.rank);
  if (axis < 0 || axis >= id.shape.rank || od.shape.rank != id.shape.rank || p.step < 1 ||
      p.start < 0 || od.dtype != id.dtype)
    return make_error(ErrorCode::INVALID_ARGUMENT, "slice: {} -> {} with {}", id.str(), od.str(),
                      p.str(OpKind::SLICE));
  const int64_t n_out = od.shape.dims[axis];
  if (n_out > 0 && p.start + (n_out - 1) * p.step >= id.shape.dims[axis])
    return make_error(ErrorCode::INVALID_ARGUMENT, "slice: output {} reads past input {}",
                      od.str(), id.str());
  const size_t esize = dtype_size(id.dtype);
  const int64_t outer = id.shape.prod(0, axis);
  const size_t inner = size_t(id.shape.prod(axis + 1, id.shape.rank)) * esize;
  const int64_t n_in = id.shape.dims[axis];
  const uint8_t* src = c.inputs[0].as<const uint8_t>();
  uint8_t* dst = c.output.as<uint8_t>();
  const int64_t total = outer * n_out * int64_t(inner);
#pragma omp parallel for if (total >= kParallelMinBytes) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    const uint8_t* s = src + (size_t(o * n_in) + size_t(p.start)) * inner;
    uint8_t* d = dst + size_t(o * n_out) * inner;
    if (p.step == 1) {
      std::memcpy(d, s, size_t(n_out) * inner);
    } else {
      for (int64_t j = 0; j < n_out; ++j)
        std::memcpy(d + size_t(j) * inner, s + size_t(j * p.step) * inner, inner);
    }
  }
  return Status();
}

Status permute(const OpCall& c) {
  HR_TRY(need_inputs(c, 1));
  const TensorDesc& id = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  const int rank = id.shape.rank;
  const OpParams p = c.params ? *c.params : OpParams();
  const int32_t* perm = p.perm;
  bool seen[kMaxDims] = {};
  bool ok = od.shape.rank == rank && od.dtype == id.dtype;
  for (int i = 0; ok && i < rank; ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]] &&
         od.shape.dims[i] == id.shape.dims[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return make_error(ErrorCode::INVALID_ARGUMENT, "permute: {} -> {} is not a permutation",
                      id.str(), od.str());
  const size_t esize = dtype_size(id.dtype);
  if (id.numel() == 0) return Status();

  // Input strides, then the output's dims with the input stride each one walks. Size-1 dims
  // are dropped, and output neighbours that are also input neighbours merge, so a head
  // split like [B,N,H,D] -> [B,H,N,D] becomes rank 3 with a contiguous last dim.
  int64_t in_stride[kMaxDims];
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    in_stride[i] = s;
    s *= id.shape.dims[i];
  }
  int64_t dims[kMaxDims], strides[kMaxDims];
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    int64_t d = od.shape.dims[i], st = in_stride[perm[i]];
    if (d == 1) continue;
    if (r > 0 && strides[r - 1] == d * st) {
      dims[r - 1] *= d;
      strides[r - 1] = st;
    } else {
      dims[r] = d;
      strides[r] = st;
      ++r;
    }
  }
  const uint8_t* src = c.inputs[0].as<const uint8_t>();
  uint8_t* dst = c.output.as<uint8_t>();
  if (r == 0 || (r == 1 && strides[0] == 1)) {  // the identity after merging
    if (src != dst) std::memcpy(dst, src, od.bytes());
    return Status();
  }
  const int last = r - 1;
  const int64_t n = dims[last];
  const int64_t rows = od.numel() / n;
  const bool contiguous = strides[last] == 1;
#pragma omp parallel for if (int64_t(od.bytes()) >= kParallelMinBytes) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    for (int i = last - 1; i >= 0; --i) {
      off += (rem % dims[i]) * strides[i];
      rem /= dims[i];
    }
    uint8_t* d = dst + size_t(row * n) * esize;
    const uint8_t* sp = src + size_t(off) * esize;
    if (contiguous) {
      std::memcpy(d, sp, size_t(n) * esize);
    } else {
      gather_row_any(esize, sp, strides[last], d, n);
    }
  }
  return Status();
}

Status upsample_nearest(const OpCall& c) {
  HR_TRY(need_inputs(c, 1));
  const TensorDesc& id = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  const int64_t f = c.params ? c.params->factor : 2;
  if (id.shape.rank != 4 || od.shape.rank != 4 || f < 1 || od.dtype != id.dtype ||
      od.shape[0] != id.shape[0] || od.shape[1] != id.shape[1] || od.shape[2] != id.shape[2] * f ||
      od.shape[3] != id.shape[3] * f)
    return make_error(ErrorCode::INVALID_ARGUMENT, "upsample_nearest: {} -> {} with factor {}",
                      id.str(), od.str(), f);
  const size_t esize = dtype_size(id.dtype);
  const int64_t planes = id.shape[0] * id.shape[1], h = id.shape[2], w = id.shape[3];
  const size_t out_row = size_t(w * f) * esize;
  const uint8_t* src = c.inputs[0].as<const uint8_t>();
  uint8_t* dst = c.output.as<uint8_t>();
  // Each input row is widened once, then the widened row is copied f-1 more times.
#pragma omp parallel for if (int64_t(od.bytes()) >= kParallelMinBytes) schedule(static)
  for (int64_t ph = 0; ph < planes * h; ++ph) {
    const uint8_t* s = src + size_t(ph * w) * esize;
    uint8_t* d = dst + size_t(ph * f) * out_row;
    switch (esize) {
      case 2: {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(s);
        uint16_t* d16 = reinterpret_cast<uint16_t*>(d);
        for (int64_t x = 0; x < w * f; ++x) d16[x] = s16[x / f];
        break;
      }
      case 4: {
        const uint32_t* s32 = reinterpret_cast<const uint32_t*>(s);
        uint32_t* d32 = reinterpret_cast<uint32_t*>(d);
        for (int64_t x = 0; x < w * f; ++x) d32[x] = s32[x / f];
        break;
      }
      default:
        for (int64_t x = 0; x < w * f; ++x)
          std::memcpy(d + size_t(x) * esize, s + size_t(x / f) * esize, esize);
    }
    for (int64_t k = 1; k < f; ++k) std::memcpy(d + size_t(k) * out_row, d, out_row);
  }
  return Status();
}

namespace {

// CAST through f32 (op.h): each element widened, times `scale`, clamped to +-`limit` (NaN
// stays), then rounded once to the target (fp8 by torch's round-to-nearest-even cast).
Status cast_via_f32(const OpCall& c, float scale, float limit) {
  const DType in = c.inputs[0].desc.dtype, to = c.output.desc.dtype;
  const int64_t n = c.output.desc.numel();
  const size_t si = dtype_size(in), so = dtype_size(to);
  constexpr int64_t kChunk = 1 << 12;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n * int64_t(so) >= kParallelMinBytes) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float buf[kChunk];
    const int64_t lo = ch * kChunk, len = std::min(kChunk, n - lo);
    dtype_convert(static_cast<const uint8_t*>(c.inputs[0].data) + size_t(lo) * si, in, buf,
                  DType::F32, size_t(len));
    for (int64_t k = 0; k < len; ++k) buf[k] = std::clamp(buf[k] * scale, -limit, limit);
    uint8_t* dst = static_cast<uint8_t*>(c.output.data) + size_t(lo) * so;
    if (dtype_is_fp8(to))
      f32_to_f8(buf, to, dst, len);
    else
      dtype_convert(buf, DType::F32, dst, to, size_t(len));
  }
  return Status();
}

// The scale of a dequantizing CAST rounded to the target dtype, as f32 (op.h).
float scale_in(const OpCall& c) {
  float scale = *static_cast<const float*>(c.inputs[1].data);
  uint8_t raw[4];
  dtype_convert(&scale, DType::F32, raw, c.output.desc.dtype, 1);
  dtype_convert(raw, c.output.desc.dtype, &scale, DType::F32, 1);
  return scale;
}

}  // namespace

Status cast(const OpCall& c) {
  HR_TRY(need_inputs(c, 1));
  constexpr float kNoLimit = std::numeric_limits<float>::infinity();
  // The dequantizing cast: the product of an fp8 value and a 16-bit scale is exact in f32.
  if (c.inputs.size() == 2) return cast_via_f32(c, scale_in(c), kNoLimit);
  if (c.output.desc.dtype == DType::F8_E4M3 && c.inputs[0].desc.dtype != DType::F8_E4M3)
    return cast_via_f32(c, 1.0f, 448.0f);  // ComfyUI's activation clamp
  const TensorDesc& id = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  if (id.numel() != od.numel())
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: {} -> {} changes the element count",
                      op_name(c.kind), id.str(), od.str());
  if (int(od.dtype) > int(DType::I64))
    return make_error(ErrorCode::UNSUPPORTED, "{}: target dtype {} is storage-only",
                      op_name(c.kind), dtype_name(od.dtype));
  const void* src = c.inputs[0].data;
  void* dst = c.output.data;
  const int64_t n = od.numel();
  if (id.dtype == od.dtype) {
    // RESHAPE and COPY land here; a RESHAPE the planner aliased needs no work.
    if (src != dst && n) std::memmove(dst, src, od.bytes());
    return Status();
  }
  if (src == dst)
    return make_error(ErrorCode::UNSUPPORTED, "{}: in-place conversion {} -> {}", op_name(c.kind),
                      dtype_name(id.dtype), dtype_name(od.dtype));
  const size_t si = dtype_size(id.dtype), so = dtype_size(od.dtype);
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n * int64_t(so) >= kParallelMinBytes) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t lo = ch * kChunk, len = std::min(kChunk, n - lo);
    dtype_convert(static_cast<const uint8_t*>(src) + size_t(lo) * si, id.dtype,
                  static_cast<uint8_t*>(dst) + size_t(lo) * so, od.dtype, size_t(len));
  }
  return Status();
}

}  // namespace hr::cpu
