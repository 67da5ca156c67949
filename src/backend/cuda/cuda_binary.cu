// ADD/SUB/MUL/DIV with NumPy broadcasting, plus the per-channel bias add used after GEMMs and
// convolutions. Fast paths for same-shape and "one contiguous block of broadcast dims" operands,
// 16 bytes per thread where the shapes and addresses allow (Note [vectorised binary]).
#include <algorithm>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

template <BinaryOp OP>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (OP == BinaryOp::ADD)
    return a + b;
  else if constexpr (OP == BinaryOp::SUB)
    return a - b;
  else if constexpr (OP == BinaryOp::MUL)
    return a * b;
  else
    return a / b;
}

template <typename T, BinaryOp OP>
__global__ void same_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                            int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(apply<OP>(to_f32(a[i]), to_f32(b[i])));
}

// One operand has the output's shape; the other (`small`) varies only over one contiguous block
// of output dims: its index is (i / inner) % count. Covers scalars, rows, conv biases and temb.
template <typename T, BinaryOp OP>
__global__ void block_kernel(const T* __restrict__ full, const T* __restrict__ small,
                             T* __restrict__ y, int64_t n, int64_t inner, int64_t count,
                             bool small_is_a) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float f = to_f32(full[i]), sm = to_f32(small[(i / inner) % count]);
    y[i] = from_f32<T>(small_is_a ? apply<OP>(sm, f) : apply<OP>(f, sm));
  }
}

// Note [vectorised binary]
// Element-wise ops are memory bound. One thread per element with 2-byte loads and a 64-bit
// division per element for the broadcast operand's index ran at ~1.2 TB/s of the H200's ~4
// (the Flux DiT step's 484 element-wise nodes, 31 ms of 144: the 2026-12-04 profile in
// bench/PERF_NOTES.md), as GEGLU did before Note [vectorised GEGLU]. Here a thread moves 16 bytes
// of each operand (kVec elements) and computes the broadcast operand's index once per vector:
// same-shape operands; and the block pattern where either inner is a multiple of kVec (one small
// value per vector: a per-channel term of an NCHW image) or inner is 1 with count a multiple of
// kVec (kVec consecutive small values: a per-channel term [B, 1, C] of tokens [B, N, C], the
// DiTs' modulation). Every address must be 16-byte aligned; anything else takes the scalar paths.
template <typename T, BinaryOp OP>
__device__ __forceinline__ uint4 apply_vec(uint4 a, uint4 b) {
  constexpr int kVec = kVecOf<T>;
  const T* av = reinterpret_cast<const T*>(&a);
  const T* bv = reinterpret_cast<const T*>(&b);
  uint4 o;
  T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int j = 0; j < kVec; ++j) ov[j] = from_f32<T>(apply<OP>(to_f32(av[j]), to_f32(bv[j])));
  return o;
}

template <typename T>
__device__ __forceinline__ uint4 splat(T v) {
  constexpr int kVec = kVecOf<T>;
  uint4 o;
  T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int j = 0; j < kVec; ++j) ov[j] = v;
  return o;
}

template <typename T, BinaryOp OP>
__global__ void same_vec_kernel(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                uint4* __restrict__ y, int64_t nv) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = apply_vec<T, OP>(a[i], b[i]);
}

// The block pattern with inner % kVec == 0 (`per_vector`: one small value per vector, at
// (i * kVec / inner) % count) or inner == 1 and count % kVec == 0 (kVec small values at
// (i * kVec) % count).
template <typename T, BinaryOp OP>
__global__ void block_vec_kernel(const uint4* __restrict__ full, const T* __restrict__ small,
                                 uint4* __restrict__ y, int64_t nv, int64_t inner, int64_t count,
                                 bool per_vector, bool small_is_a) {
  constexpr int kVec = kVecOf<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec;
    const uint4 sm = per_vector ? splat<T>(small[(e / inner) % count])
                                : *reinterpret_cast<const uint4*>(small + e % count);
    y[i] = small_is_a ? apply_vec<T, OP>(sm, full[i]) : apply_vec<T, OP>(full[i], sm);
  }
}

struct Strides {
  int rank;
  int64_t dims[kMaxDims];
  int64_t sa[kMaxDims];
  int64_t sb[kMaxDims];
};

template <typename T, BinaryOp OP>
__global__ void general_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                               int64_t n, Strides st) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = st.rank - 1; d >= 0; --d) {
      int64_t idx = rem % st.dims[d];
      rem /= st.dims[d];
      oa += idx * st.sa[d];
      ob += idx * st.sb[d];
    }
    y[i] = from_f32<T>(apply<OP>(to_f32(a[oa]), to_f32(b[ob])));
  }
}

template <typename T>
__global__ void channel_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t n,
                                    int64_t c, int64_t inner) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[(i / inner) % c]));
}

// Right-aligns `s` to rank r (leading 1s).
void align(const Shape& s, int r, int64_t* out) {
  for (int i = 0; i < r; ++i) {
    int j = s.rank - r + i;
    out[i] = j >= 0 ? s.dims[j] : 1;
  }
}

// When `small` (aligned to ys) equals ys on one contiguous block [lo, hi) and is 1 elsewhere,
// returns true with inner = product of ys dims after hi and count = product over the block.
bool block_pattern(const int64_t* small, const Shape& ys, int64_t* inner, int64_t* count) {
  int lo = -1, hi = -1;
  bool gap = false;  // a broadcast dim seen after the block started
  for (int d = 0; d < ys.rank; ++d) {
    if (small[d] == 1 && ys.dims[d] != 1) {
      if (lo >= 0) gap = true;
      continue;
    }
    if (small[d] != ys.dims[d]) return false;
    if (ys.dims[d] == 1) continue;  // a 1 in both: neutral
    if (lo < 0)
      lo = d;
    else if (gap)
      return false;  // a second block
    hi = d + 1;
  }
  if (lo < 0) lo = hi = ys.rank;  // scalar-like
  *inner = 1;
  for (int d = hi; d < ys.rank; ++d) *inner *= ys.dims[d];
  *count = 1;
  for (int d = lo; d < hi; ++d) *count *= ys.dims[d];
  return true;
}

// The block pattern (block_pattern), vectorised where its inner and count allow.
template <typename T, BinaryOp OP>
cudaError_t launch_block(const T* full, const T* small, T* y, int64_t n, int64_t inner,
                         int64_t count, bool small_is_a, bool vec, cudaStream_t s) {
  constexpr int kVec = kVecOf<T>;
  const bool per_vector = inner % kVec == 0;
  if (vec && (per_vector || (inner == 1 && count % kVec == 0)))  // Note [vectorised binary]
    return launch(block_vec_kernel<T, OP>, dim3(grid_1d(n / kVec, 256)), dim3(256), 0, s,
                  reinterpret_cast<const uint4*>(full), small, reinterpret_cast<uint4*>(y),
                  n / kVec, inner, count, per_vector, small_is_a);
  return launch(block_kernel<T, OP>, dim3(grid_1d(n, 256)), dim3(256), 0, s, full, small, y, n,
                inner, count, small_is_a);
}

template <typename T, BinaryOp OP>
cudaError_t launch_binary(const void* a, const Shape& as, const void* b, const Shape& bs, void* y,
                          const Shape& ys, cudaStream_t s) {
  const int64_t n = ys.numel();
  const unsigned grid = grid_1d(n, 256);
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* py = static_cast<T*>(y);
  int64_t da[kMaxDims], db[kMaxDims];
  align(as, ys.rank, da);
  align(bs, ys.rank, db);
  bool a_full = as.numel() == n, b_full = bs.numel() == n;
  int64_t inner = 1, count = 1;
  constexpr int kVec = kVecOf<T>;
  const bool vec = n % kVec == 0 && aligned16(a) && aligned16(b) && aligned16(y);
  if (a_full && b_full) {
    if (vec)  // Note [vectorised binary]
      return launch(same_vec_kernel<T, OP>, dim3(grid_1d(n / kVec, 256)), dim3(256), 0, s,
                    static_cast<const uint4*>(a), static_cast<const uint4*>(b),
                    static_cast<uint4*>(y), n / kVec);
    return launch(same_kernel<T, OP>, dim3(grid), dim3(256), 0, s, pa, pb, py, n);
  }
  if (a_full && block_pattern(db, ys, &inner, &count))
    return launch_block<T, OP>(pa, pb, py, n, inner, count, false, vec, s);
  if (b_full && block_pattern(da, ys, &inner, &count))
    return launch_block<T, OP>(pb, pa, py, n, inner, count, true, vec, s);
  Strides st{};
  st.rank = ys.rank;
  int64_t ra = 1, rb = 1;
  for (int d = ys.rank - 1; d >= 0; --d) {
    st.dims[d] = ys.dims[d];
    st.sa[d] = da[d] == 1 ? 0 : ra;
    st.sb[d] = db[d] == 1 ? 0 : rb;
    ra *= da[d];
    rb *= db[d];
  }
  return launch(general_kernel<T, OP>, dim3(grid), dim3(256), 0, s, pa, pb, py, n, st);
}

}  // namespace

cudaError_t binary(BinaryOp op, DType t, const void* a, const Shape& as, const void* b,
                   const Shape& bs, void* y, const Shape& ys, cudaStream_t s) {
  if (ys.numel() == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::ADD:
        return launch_binary<T, BinaryOp::ADD>(a, as, b, bs, y, ys, s);
      case BinaryOp::SUB:
        return launch_binary<T, BinaryOp::SUB>(a, as, b, bs, y, ys, s);
      case BinaryOp::MUL:
        return launch_binary<T, BinaryOp::MUL>(a, as, b, bs, y, ys, s);
      case BinaryOp::DIV:
        return launch_binary<T, BinaryOp::DIV>(a, as, b, bs, y, ys, s);
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t add_channel_bias(DType t, void* y, const void* bias, int64_t outer, int64_t c,
                             int64_t inner, cudaStream_t s) {
  const int64_t n = outer * c * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch(channel_bias_kernel<T>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                  static_cast<T*>(y), static_cast<const T*>(bias), n, c, inner);
  });
}

}  // namespace hr::cuda
