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

// [N, H, W, C] -> [N, OH, OW, C] with zero borders; `E` moves one channel.
template <typename E>
__global__ void pad_nhwc_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t h,
                                int64_t w, int64_t c, int pt, int pl, int64_t oh, int64_t ow) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = i % c, r = i / c;
    const int64_t xo = r % ow, r2 = r / ow;
    const int64_t yo = r2 % oh, b = r2 / oh;
    const int64_t xi = xo - pl, yi = yo - pt;
    y[i] = (xi >= 0 && xi < w && yi >= 0 && yi < h) ? x[((b * h + yi) * w + xi) * c + ch] : E(0);
  }
}

// y (+)= bias[channel] + term, the term full-shaped or per (sample, channel).
template <typename T>
__global__ void conv_epilogue_kernel(T* __restrict__ y, const T* __restrict__ bias,
                                     const T* __restrict__ term, bool per_channel, int64_t n,
                                     int64_t c, int64_t hw, bool channels_last) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = channels_last ? i % c : (i / hw) % c;
    float v = to_f32(y[i]);
    if (bias) v += to_f32(bias[ch]);
    if (term) v += to_f32(term[per_channel ? (i / (hw * c)) * c + ch : i]);
    y[i] = from_f32<T>(v);
  }
}

// 16-bit, channels-last, C a multiple of 8: eight channels per thread with 16-byte accesses.
template <typename T>
__global__ void conv_epilogue_nhwc8_kernel(T* __restrict__ y, const T* __restrict__ bias,
                                           const T* __restrict__ term, bool per_channel,
                                           int64_t packs, int64_t c, int64_t hw) {
  struct alignas(16) P8 { T v[8]; };
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * 8, ch0 = e % c;
    P8 yv = reinterpret_cast<P8*>(y)[i];
    P8 tv{};
    if (term) tv = reinterpret_cast<const P8*>(term)[per_channel ? ((e / (hw * c)) * c + ch0) / 8 : i];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = to_f32(yv.v[k]);
      if (bias) v += to_f32(bias[ch0 + k]);
      if (term) v += to_f32(tv.v[k]);
      yv.v[k] = from_f32<T>(v);
    }
    reinterpret_cast<P8*>(y)[i] = yv;
  }
}

template <typename T>
__global__ void conv_direct_kernel(ConvArgs a, int64_t n) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  const int cg = a.c / a.groups, og = a.o / a.groups;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int ox, oy, o;
    int64_t nb;
    if (a.channels_last) {  // y [N, OH, OW, O]
      o = int(i % a.o);
      int64_t r = i / a.o;
      ox = int(r % a.ow);
      r /= a.ow;
      oy = int(r % a.oh);
      nb = r / a.oh;
    } else {  // y [N, O, OH, OW]
      ox = int(i % a.ow);
      int64_t r = i / a.ow;
      oy = int(r % a.oh);
      r /= a.oh;
      o = int(r % a.o);
      nb = r / a.o;
    }
    const int g = o / og;
    float acc = 0.0f;
    for (int ci = 0; ci < cg; ++ci) {
      const int64_t cin = int64_t(g) * cg + ci;
      for (int ky = 0; ky < a.kh; ++ky) {
        const int iy = oy * a.stride[0] - a.pad_top + ky * a.dilation[0];
        if (iy < 0 || iy >= a.h) continue;
        for (int kx = 0; kx < a.kw; ++kx) {
          const int ix = ox * a.stride[1] - a.pad_left + kx * a.dilation[1];
          if (ix < 0 || ix >= a.wd) continue;
          const float xv = a.channels_last
                               ? to_f32(x[((nb * a.h + iy) * a.wd + ix) * a.c + cin])
                               : to_f32(x[((nb * a.c + cin) * a.h + iy) * a.wd + ix]);
          const float wv = a.channels_last
                               ? to_f32(w[((int64_t(o) * a.kh + ky) * a.kw + kx) * cg + ci])
                               : to_f32(w[((int64_t(o) * cg + ci) * a.kh + ky) * a.kw + kx]);
          acc += xv * wv;
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
      return launch(pad_kernel<uint16_t>, dim3(grid), dim3(256), 0, s,
                    static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n, h, w, pt, pl, oh,
                    ow);
    case 4:
      return launch(pad_kernel<uint32_t>, dim3(grid), dim3(256), 0, s,
                    static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), n, h, w, pt, pl, oh,
                    ow);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t pad2d_nhwc(size_t esize, const void* x, int64_t n, int64_t h, int64_t w, int64_t c,
                       int pt, int pb, int pl, int pr, void* y, cudaStream_t s) {
  const int64_t oh = h + pt + pb, ow = w + pl + pr, total = n * oh * ow * c;
  if (total == 0) return cudaSuccess;
  const unsigned grid = grid_1d(total, 256);
  switch (esize) {
    case 2:
      return launch(pad_nhwc_kernel<uint16_t>, dim3(grid), dim3(256), 0, s,
                    static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), total, h, w, c, pt,
                    pl, oh, ow);
    case 4:
      return launch(pad_nhwc_kernel<uint32_t>, dim3(grid), dim3(256), 0, s,
                    static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), total, h, w, c, pt,
                    pl, oh, ow);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t conv_epilogue(DType t, void* y, const void* bias, const void* term, bool per_channel,
                          int64_t n, int64_t c, int64_t hw, bool channels_last, cudaStream_t s) {
  const int64_t total = n * c * hw;
  if (total == 0 || (!bias && !term)) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const uintptr_t al = reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(term);
    if constexpr (sizeof(T) == 2) {
      if (channels_last && c % 8 == 0 && al % 16 == 0) {
        const int64_t packs = total / 8;
        return launch(conv_epilogue_nhwc8_kernel<T>, dim3(grid_1d(packs, 256)), dim3(256), 0, s,
                      static_cast<T*>(y), static_cast<const T*>(bias),
                      static_cast<const T*>(term), per_channel, packs, c, hw);
      }
    }
    return launch(conv_epilogue_kernel<T>, dim3(grid_1d(total, 256)), dim3(256), 0, s,
                  static_cast<T*>(y), static_cast<const T*>(bias), static_cast<const T*>(term),
                  per_channel, total, c, hw, channels_last);
  });
}

cudaError_t conv2d_direct(const ConvArgs& a, cudaStream_t s) {
  const int64_t n = int64_t(a.n) * a.o * a.oh * a.ow;
  if (n == 0) return cudaSuccess;
  return dispatch_float(a.dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch(conv_direct_kernel<T>, dim3(grid_1d(n, 128)), dim3(128), 0, s, a, n);
  });
}

}  // namespace hr::cuda
