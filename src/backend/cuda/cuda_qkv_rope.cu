// QKV_ROPE on the GPU: one warp per (token, q-or-k head) normalises and rotates that head's
// vector; v moves by a strided 2-D copy. Arithmetic as RMS_NORM's and ROPE's kernels (Note [fused
// qk norm and rope] in backend/cpu/cpu_qkv_rope.cpp).
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

constexpr int kQkvWarps = 8;  // head vectors per block

struct Groups {
  QkvRopeGroup g[kQkvRopeMaxGroups];
  int n = 0;
};

// Task t: token row t / (2H) of the output (b, l), head (t % (2H)) % H of q (first H) or k.
template <typename T>
__global__ void qkv_rope_kernel(Groups groups, const float* __restrict__ cs, T* __restrict__ out,
                                int64_t tasks, int64_t len, int64_t heads, int64_t d, float eps,
                                bool split) {
  const int lane = threadIdx.x & 31;
  const int64_t task = int64_t(blockIdx.x) * kQkvWarps + (threadIdx.x >> 5);
  if (task >= tasks) return;  // whole warps leave together
  const int64_t row = task / (2 * heads), j = task % (2 * heads);
  const int64_t b = row / len, l = row % len, width = heads * d;
  int gi = 0;
  while (gi + 1 < groups.n && l >= groups.g[gi + 1].first) ++gi;
  const QkvRopeGroup& g = groups.g[gi];
  const int64_t col = (j >= heads ? width : 0) + (j % heads) * d;
  const T* x = static_cast<const T*>(g.x) + (b * g.len + (l - g.first)) * g.pitch + col;
  const T* w = static_cast<const T*>(j >= heads ? g.gk : g.gq);
  T* y = out + (b * len + l) * 3 * width + col;
  const float* row_cs = cs + l * d;
  const int64_t half = d / 2, step = split ? 1 : 2, second = split ? half : 1;

  float sum = 0.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float v = to_f32(x[i]);
    sum += v * v;
  }
  sum = warp_sum(sum);
  const float rstd = 1.0f / sqrtf(__fdiv_rn(sum, float(d)) + eps);
  // RMS_NORM's value, rounded to T as that op's output is, then ROPE's rotation of it.
  auto normed = [&](int64_t i) {
    return to_f32(from_f32<T>(__fmul_rn(__fmul_rn(to_f32(x[i]), rstd), to_f32(w[i]))));
  };
  for (int64_t p = lane; p < half; p += 32) {
    const int64_t e0 = p * step, e1 = e0 + second;
    const float co = row_cs[2 * p], si = row_cs[2 * p + 1];
    const float u = normed(e0), v = normed(e1);
    y[e0] = from_f32<T>(__fsub_rn(__fmul_rn(co, u), __fmul_rn(si, v)));
    y[e1] = from_f32<T>(__fadd_rn(__fmul_rn(si, u), __fmul_rn(co, v)));
  }
}

}  // namespace

cudaError_t qkv_rope(DType t, const QkvRopeGroup* groups, int n, const float* cs, void* out,
                     int64_t batch, int64_t heads, int64_t d, float eps, bool half_split,
                     cudaStream_t s) {
  if (n < 1 || n > kQkvRopeMaxGroups) return cudaErrorInvalidValue;
  Groups gs;
  gs.n = n;
  int64_t len = 0;
  for (int i = 0; i < n; ++i) {
    gs.g[i] = groups[i];
    gs.g[i].first = len;
    len += groups[i].len;
  }
  const int64_t tasks = batch * len * 2 * heads, width = heads * d;
  if (tasks == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const size_t es = sizeof(T);
    const int64_t blocks = (tasks + kQkvWarps - 1) / kQkvWarps;
    cudaError_t e = launch(qkv_rope_kernel<T>, dim3(unsigned(blocks)), dim3(32 * kQkvWarps), 0, s,
                           gs, cs, static_cast<T*>(out), tasks, len, heads, d, eps, half_split);
    // v: each (group, sample) is a block of rows with its own pitches.
    for (int i = 0; i < n && e == cudaSuccess; ++i)
      for (int64_t b = 0; b < batch && e == cudaSuccess; ++b) {
        const QkvRopeGroup& g = gs.g[i];
        const char* src = static_cast<const char*>(g.x) + (b * g.len * g.pitch + 2 * width) * es;
        char* dst = static_cast<char*>(out) + ((b * len + g.first) * 3 * width + 2 * width) * es;
        if (g.len > 0)
          e = cudaMemcpy2DAsync(dst, size_t(3 * width) * es, src, size_t(g.pitch) * es,
                                size_t(width) * es, size_t(g.len), cudaMemcpyDeviceToDevice, s);
      }
    return e;
  });
}

}  // namespace hr::cuda
