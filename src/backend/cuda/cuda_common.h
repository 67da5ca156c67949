// The CUDA backend's kernel launchers (one family per .cu file) and the device-side helpers they
// share. Kept to C++17 with plain arguments: nvcc compiles .cu files in its default dialect.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "core/shape.h"

namespace hr::cuda {

// Every launcher returns cudaGetLastError() after its launches (cudaSuccess when there was
// nothing to do) or cudaErrorInvalidValue for a dtype it lacks; the backend names the op and
// the call when it turns that into a Status.

// --- cuda_unary.cu ----------------------------------------------------------------------------
enum class UnaryOp : uint8_t { GELU, GELU_TANH, QUICK_GELU, SILU, TANH, SCALE };
cudaError_t unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, float alpha, float beta,
                  cudaStream_t s);
// x[rows, 2n] -> y[rows, n] = x[:, :n] * gelu_erf(x[:, n:]).
cudaError_t geglu(DType t, const void* x, void* y, int64_t rows, int64_t n, cudaStream_t s);

// --- cuda_binary.cu ---------------------------------------------------------------------------
enum class BinaryOp : uint8_t { ADD, SUB, MUL, DIV };
// y = a op b with NumPy broadcasting; shapes as in op.h, out the broadcast shape.
cudaError_t binary(BinaryOp op, DType t, const void* a, const Shape& as, const void* b,
                   const Shape& bs, void* y, const Shape& ys, cudaStream_t s);
// y[outer, c, inner] += bias[c] (conv bias, linear bias when the GEMM epilogue is unavailable).
cudaError_t add_channel_bias(DType t, void* y, const void* bias, int64_t outer, int64_t c,
                             int64_t inner, cudaStream_t s);

// --- cuda_softmax.cu --------------------------------------------------------------------------
cudaError_t softmax(DType t, const void* x, void* y, int64_t rows, int64_t n, float scale,
                    cudaStream_t s);

// --- cuda_norm.cu -----------------------------------------------------------------------------
cudaError_t group_norm(DType t, const void* x, const void* gamma, const void* beta, void* y,
                       int64_t n, int64_t c, int64_t spatial, int groups, float eps, bool silu,
                       cudaStream_t s);
// Channels-last group norm (Note [channels-last group norm] in cuda_norm.cu): x [N, S, C].
// The workspace holds per-chunk partial moments and per-group statistics.
struct GroupNormNhwcPlan {
  int64_t chunks = 1, rows_per_chunk = 1;
  size_t partial_bytes = 0, stats_bytes = 0;
  size_t workspace() const { return partial_bytes + stats_bytes; }
};
GroupNormNhwcPlan group_norm_nhwc_plan(int64_t n, int64_t s, int64_t c, int groups);
cudaError_t group_norm_nhwc(DType t, const void* x, const void* gamma, const void* beta, void* y,
                            int64_t n, int64_t s, int64_t c, int groups, float eps, bool silu,
                            void* workspace, cudaStream_t st);
// beta may be null.
cudaError_t layer_norm(DType t, const void* x, const void* gamma, const void* beta, void* y,
                       int64_t rows, int64_t c, float eps, cudaStream_t s);
// The first layer norm kernels (Note [vectorised norms] in cuda_norm.cu): what layer_norm takes
// for widths or pointers its 16-byte packs cannot; bench_norms times them against the packs in one
// run. (The first channels-last group norm is bench/dev/group_norm_v1.cu.)
cudaError_t layer_norm_v1(DType t, const void* x, const void* gamma, const void* beta, void* y,
                          int64_t rows, int64_t c, float eps, cudaStream_t s);

// --- cuda_rms_norm.cu -------------------------------------------------------------------------
// x, y [rows, c]; w [c] or null (Note [rms norm rounding] in backend/cpu/cpu_rms_norm.cpp).
cudaError_t rms_norm(DType t, const void* x, const void* w, void* y, int64_t rows, int64_t c,
                     float eps, cudaStream_t s);

// --- cuda_rope.cu -----------------------------------------------------------------------------
// x, y [batch, len, heads, d] of dtype t; cs f32 [len, d/2, 2] ([batch, len, d/2, 2] when
// per_batch); pairs (2p, 2p+1), or (p, p + d/2) when half_split (ROPE in op.h).
cudaError_t rope(DType t, const void* x, const float* cs, void* y, int64_t batch, int64_t len,
                 int64_t heads, int64_t d, bool per_batch, bool half_split, cudaStream_t s);

// --- cuda_qkv_rope.cu -------------------------------------------------------------------------
// QKV_ROPE (op.h): group i's x [batch, len, pitch] of dtype t holds q, k, v in its first
// 3 * heads * d columns; gq, gk [d]; cs f32 [sum of len, d/2, 2]; out [batch, sum of len,
// 3 * heads * d]. `first` is filled in by the launcher.
constexpr int kQkvRopeMaxGroups = 4;
struct QkvRopeGroup {
  const void* x = nullptr;
  const void* gq = nullptr;
  const void* gk = nullptr;
  int64_t len = 0, pitch = 0, first = 0;
};
cudaError_t qkv_rope(DType t, const QkvRopeGroup* groups, int n, const float* cs, void* out,
                     int64_t batch, int64_t heads, int64_t d, float eps, bool half_split,
                     cudaStream_t s);

// --- cuda_attention.cu ------------------------------------------------------------------------
struct AttentionArgs {
  DType dtype = DType::F32;
  const void* q = nullptr;  // [B, Nq, H*D]
  const void* k = nullptr;  // [B, Nk, H*D]
  const void* v = nullptr;  // [B, Nk, H*Dv]
  void* o = nullptr;        // [B, Nq, H*Dv]
  int b = 0, nq = 0, nk = 0, heads = 0, d = 0, dv = 0;
  // Row pitch of q, k and v in elements; 0 means dense (H*D, H*Dv). Only the v2 tensor-core
  // kernels (attention_tc with a positive scale) read these: attention_strided_supported. The
  // output is always dense.
  int64_t ldq = 0, ldk = 0, ldv = 0;
  float scale = 1.0f;
  bool causal = false;
};
// Head dims the fused kernel handles: multiples of 4 up to kAttentionMaxDim.
constexpr int kAttentionMaxDim = 512;
bool attention_supported(int d, int dv);
cudaError_t attention(const AttentionArgs& a, cudaStream_t s);
// cuda_attention_tc.cu: the tensor-core path attention() takes for f16/bf16, non-causal,
// D == Dv in {40, 64, 80, 160} with 16-byte aligned tensors.
bool attention_tc_supported(const AttentionArgs& a);
// cuda_attention_fa2.cu: which tensor-core kernel runs. AUTO picks per shape (Note [attention
// v2 shapes]); the others name one block shape (queries per block, keys per tile) or the first
// kernel (V1, cuda_attention_tc.cu) so that bench_attention can time them in one run.
enum class AttentionTc : uint8_t { AUTO, V1, Q64_K64, Q64_K80, Q128_K64, Q128_K80 };
cudaError_t attention_tc(const AttentionArgs& a, cudaStream_t s,
                         AttentionTc kernel = AttentionTc::AUTO);
cudaError_t attention_tc_v1(const AttentionArgs& a, cudaStream_t s);
// Whether attention_tc runs `a` with its ldk / ldv pitches (the v2 kernels: f16/bf16, D == Dv in
// {40, 64, 80, 160}, positive scale, 16-byte aligned rows).
bool attention_strided_supported(const AttentionArgs& a);

// --- cuda_layout.cu ---------------------------------------------------------------------------
// Element-size-generic data movement (esize 1, 2, 4 or 8 bytes).
cudaError_t permute(size_t esize, const void* x, const Shape& in, const int* perm, void* y,
                    cudaStream_t s);
// y[outer, out_dim, inner] = x[outer, start + i*step, inner] with x's axis of size in_dim.
// dst/src rows of `width` bytes, `rows` of them, pitches in bytes (cuda_copy.cu).
cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t rows, cudaStream_t s);
cudaError_t slice_strided(size_t esize, const void* x, int64_t outer, int64_t in_dim,
                          int64_t inner, int64_t start, int64_t step, int64_t out_dim, void* y,
                          cudaStream_t s);
// x [N, H, W, C] -> [N, H*f, W*f, C].
cudaError_t upsample_nearest_nhwc(size_t esize, const void* x, int64_t n, int64_t h, int64_t w,
                                  int64_t c, int factor, void* y, cudaStream_t s);
cudaError_t upsample_nearest(size_t esize, const void* x, int64_t planes, int64_t h, int64_t w,
                             int factor, void* y, cudaStream_t s);
// Element-wise conversion between compute dtypes, rounding as dtype_convert does.
cudaError_t cast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t s);
// CAST with a scale (op.h): y = to(from(x) * to(*scale)), rounded once; `scale` on the device.
cudaError_t cast_scaled(DType from, const void* x, const float* scale, DType to, void* y,
                        int64_t n, cudaStream_t s);

// --- cuda_embedding.cu ------------------------------------------------------------------------
// Note [deferred op errors]: a kernel cannot return a Status, so an id outside [0, V) writes a
// zero row and sets *error_flag (host-mapped memory); the backend reports it at the next sync.
cudaError_t embedding(DType id_t, const void* ids, int64_t n_ids, size_t row_bytes,
                      const void* table, int64_t vocab, void* y, int* error_flag,
                      cudaStream_t s);
cudaError_t timestep_embedding(const float* t, int64_t n, int dim, float neg_log_period,
                               float denom, bool flip_sin_to_cos, DType out_t, void* y,
                               cudaStream_t s);

// --- cuda_conv_kernels.cu ---------------------------------------------------------------------
// Zero-pads x[planes, h, w] into y[planes, h+pt+pb, w+pl+pr].
cudaError_t pad2d(size_t esize, const void* x, int64_t planes, int64_t h, int64_t w, int pt,
                  int pb, int pl, int pr, void* y, cudaStream_t s);
struct ConvArgs {
  DType dtype = DType::F32;
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;  // the convolution alone: conv2d adds bias and terms in its epilogue
  int n = 0, c = 0, h = 0, wd = 0, o = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int stride[2] = {1, 1}, pad_top = 0, pad_left = 0, dilation[2] = {1, 1}, groups = 1;
  bool channels_last = false;  // x [N, H, W, C], w [O, KH, KW, C/groups], y [N, OH, OW, O]
};
// [N, H, W, C] zero-padded to [N, H+pt+pb, W+pl+pr, C] (esize 2 or 4).
cudaError_t pad2d_nhwc(size_t esize, const void* x, int64_t n, int64_t h, int64_t w, int64_t c,
                       int pt, int pb, int pl, int pr, void* y, cudaStream_t s);
// A convolution's epilogue in place on y [N, C, HW] or channels-last [N, HW, C]: adds bias[C]
// (may be null) and `term` (may be null): y's shape, or [N, C] when per_channel.
cudaError_t conv_epilogue(DType t, void* y, const void* bias, const void* term, bool per_channel,
                          int64_t n, int64_t c, int64_t hw, bool channels_last, cudaStream_t s);
// Direct convolution, one thread per output (f32 accumulation): the fallback when cuDNN has no
// algorithm for a configuration.
cudaError_t conv2d_direct(const ConvArgs& a, cudaStream_t s);

// --- host-side helpers ------------------------------------------------------------------------
// Multiprocessors of the device current at the first call (132, an H200's, where the query
// fails); read once.
int sm_count();

// One launch path for headroom's kernels: cudaLaunchKernelEx with no attributes (what <<<>>>
// does), returning the launch's error or the one it left behind. (Programmatic dependent launch,
// once an attribute set here, measured no gain and was removed: bench/PERF_NOTES.md, "Removed
// from the product".)
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  const cudaError_t last = cudaGetLastError();  // clears the slot, as after a <<<>>> launch
  return e != cudaSuccess ? e : last;
}

// Elements of T in one 16-byte vector, and whether an address allows 16-byte loads and stores
// (the vectorised element-wise paths: Notes [vectorised GEGLU], [vectorised binary]).
template <typename T>
constexpr int kVecOf = 16 / int(sizeof(T));
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline unsigned grid_1d(int64_t n, int block) {
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  // Grid-stride loops cover the rest; enough blocks to fill any current GPU many times.
  return unsigned(g > (1 << 20) ? (1 << 20) : g);
}

// Calls f with a value of the element type of float dtype t.
template <typename F>
cudaError_t dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

#ifdef __CUDACC__
// --- device-side helpers: loads widen to f32, stores round to nearest even ----------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Four consecutive elements (16-byte aligned for f32, 8-byte for 16-bit types).
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
template <typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  uint2 raw = *reinterpret_cast<const uint2*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
  return make_float4(to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3]));
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v) {
  uint2 raw;
  T* e = reinterpret_cast<T*>(&raw);
  e[0] = from_f32<T>(v.x);
  e[1] = from_f32<T>(v.y);
  e[2] = from_f32<T>(v.z);
  e[3] = from_f32<T>(v.w);
  *reinterpret_cast<uint2*>(p) = raw;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the function synchronises before reusing it.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  float r = lane < nw ? scratch[lane] : 0.0f;
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  float r = lane < nw ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
#endif  // __CUDACC__

}  // namespace hr::cuda
