// Device-to-device copies as kernels, never cudaMemcpy*Async (Note [copies as kernels]).
#include <cstdint>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

// Note [copies as kernels]
// A recorded memcpy node keeps what the driver resolved its addresses to when the graph was
// instantiated; a recorded kernel keeps only the addresses. Weights are freed and uploaded
// again between runs (--novram, eviction) and often land at the same address, which makes a
// captured replay look valid: a memcpy node would then read the freed allocation's records
// (a segfault inside cudaGraphLaunch), a kernel just reads the new copy. So CONCAT, SLICE,
// RESHAPE, COPY and same-dtype CAST move device bytes with this kernel; only host<->device
// copies stay memcpys, and their buffers are tracked by the executor (Note [captures and freed
// memory] in graph/executor.cpp).
template <typename E>
__global__ void copy_2d_kernel(E* __restrict__ dst, int64_t dpitch, const E* __restrict__ src,
                               int64_t spitch, int64_t width, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i - row * width;
    dst[row * dpitch + col] = src[row * spitch + col];
  }
}

template <typename E>
cudaError_t copy_2d_as(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                       size_t rows, cudaStream_t s) {
  const int64_t w = int64_t(width / sizeof(E)), total = w * int64_t(rows);
  return launch(copy_2d_kernel<E>, dim3(grid_1d(total, 256)), dim3(256), 0, s,
                static_cast<E*>(dst), int64_t(dpitch / sizeof(E)), static_cast<const E*>(src),
                int64_t(spitch / sizeof(E)), w, total);
}

}  // namespace

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t rows, cudaStream_t s) {
  if (width == 0 || rows == 0) return cudaSuccess;
  // The widest unit that divides both addresses, both pitches and the row width.
  const uintptr_t al = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                       uintptr_t(width) | (rows > 1 ? uintptr_t(dpitch) | uintptr_t(spitch) : 0);
  if (al % 16 == 0) return copy_2d_as<uint4>(dst, dpitch, src, spitch, width, rows, s);
  if (al % 8 == 0) return copy_2d_as<uint2>(dst, dpitch, src, spitch, width, rows, s);
  if (al % 4 == 0) return copy_2d_as<uint32_t>(dst, dpitch, src, spitch, width, rows, s);
  if (al % 2 == 0) return copy_2d_as<uint16_t>(dst, dpitch, src, spitch, width, rows, s);
  return copy_2d_as<uint8_t>(dst, dpitch, src, spitch, width, rows, s);
}

}  // namespace hr::cuda
