// ROPE on the GPU: one thread per rotated pair, f32 arithmetic pinned to the CPU reference's
// roundings (Note [rope arithmetic] in backend/cpu/cpu_rope.cpp).
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

// x, y [B, L, H, D]; cs [L, D/2, 2] (per_batch: [B, L, D/2, 2]). `step` and `second` place pair
// p's elements at p * step and p * step + second within a head's vector.
template <typename T>
__global__ void rope_kernel(const T* __restrict__ x, const float* __restrict__ cs,
                            T* __restrict__ y, int64_t batch, int64_t len, int64_t heads,
                            int64_t half, bool per_batch, int step, int64_t second) {
  const int64_t pairs = batch * len * heads * half;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = k % half;
    const int64_t head = k / half;  // flat (b, l, h)
    const int64_t bl = head / heads;  // flat (b, l)
    const int64_t row = per_batch ? bl : bl % len;
    const float co = cs[(row * half + p) * 2], si = cs[(row * half + p) * 2 + 1];
    const int64_t i = head * 2 * half + p * step, j = i + second;
    const float u = to_f32(x[i]), v = to_f32(x[j]);
    // No FMA contraction: the products round to f32 before the sum, as in the reference.
    y[i] = from_f32<T>(__fsub_rn(__fmul_rn(co, u), __fmul_rn(si, v)));
    y[j] = from_f32<T>(__fadd_rn(__fmul_rn(si, u), __fmul_rn(co, v)));
  }
}

}  // namespace

cudaError_t rope(DType t, const void* x, const float* cs, void* y, int64_t batch, int64_t len,
                 int64_t heads, int64_t d, bool per_batch, bool half_split, cudaStream_t s) {
  const int64_t half = d / 2, pairs = batch * len * heads * half;
  if (pairs == 0) return cudaSuccess;
  const int step = half_split ? 1 : 2;
  const int64_t second = half_split ? half : 1;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch(rope_kernel<T>, dim3(grid_1d(pairs, 256)), dim3(256), 0, s,
                  static_cast<const T*>(x), cs, static_cast<T*>(y), batch, len, heads, half,
                  per_batch, step, second);
  });
}

}  // namespace hr::cuda
