// Kernels around the cuDNN convolution: zero padding into the workspace (for asymmetric
// padding, Note [asymmetric conv padding] in cuda_conv2d.cpp) and a direct fallback convolution.
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

template <typename E>
__global__ void pad_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t h,
                           int64_t w, int pt, int pl, int64_t oh, int64_t ow) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t xo = i % ow, r = i / ow;
    const int64_t yo = r % oh, plane = r / oh;
    const int64_t xi = xo - pl, yi = yo - pt;
    y[i] = (xi >= 0 && xi < w && yi >= 0 && yi < h) ? x[(plane * h + yi) * w + xi] : E(0);
  }
}

template <typename T>
__global__ void conv_direct_kernel(ConvArgs a, int64_t n) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  const int cg = a.c / a.groups, og = a.o / a.groups;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = int(i % a.ow);
    int64_t r = i / a.ow;
    const int oy = int(r % a.oh);
    r /= a.oh;
    const int o = int(r % a.o);
    const int64_t nb = r / a.o;
    const int g = o / og;
    float acc = bias ? to_f32(bias[o]) : 0.0f;
    for (int ci = 0; ci < cg; ++ci) {
      const T* xp = x + ((nb * a.c + int64_t(g) * cg + ci) * a.h) * a.wd;
      const T* wp = w + ((int64_t(o) * cg + ci) * a.kh) * a.kw;
      for (int ky = 0; ky < a.kh; ++ky) {
        const int iy = oy * a.stride[0] - a.pad_top + ky * a.dilation[0];
        if (iy < 0 || iy >= a.h) continue;
        for (int kx = 0; kx < a.kw; ++kx) {
          const int ix = ox * a.stride[1] - a.pad_left + kx * a.dilation[1];
          if (ix < 0 || ix >= a.wd) continue;
          acc += to_f32(xp[int64_t(iy) * a.wd + ix]) * to_f32(wp[ky * a.kw + kx]);
        }
      }
    }
    y[i] = from_f32<T>(acc);
  }
}

}  // namespace

cudaError_t pad2d(size_t esize, const void* x, int64_t planes, int64_t h, int64_t w, int pt,
                  int pb, int pl, int pr, void* y, cudaStream_t s) {
  const int64_t oh = h + pt + pb, ow = w + pl + pr, n = planes * oh * ow;
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_1d(n, 256);
  switch (esize) {
    case 2:
      pad_kernel<uint16_t><<<grid, 256, 0, s>>>(static_cast<const uint16_t*>(x),
                                                 static_cast<uint16_t*>(y), n, h, w, pt, pl, oh, ow);
      break;
    case 4:
      pad_kernel<uint32_t><<<grid, 256, 0, s>>>(static_cast<const uint32_t*>(x),
                                                 static_cast<uint32_t*>(y), n, h, w, pt, pl, oh, ow);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t conv2d_direct(const ConvArgs& a, cudaStream_t s) {
  const int64_t n = int64_t(a.n) * a.o * a.oh * a.ow;
  if (n == 0) return cudaSuccess;
  return dispatch_float(a.dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    conv_direct_kernel<T><<<grid_1d(n, 128), 128, 0, s>>>(a, n);
    return cudaGetLastError();
  });
}

}  // namespace hr::cuda
