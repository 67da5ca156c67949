// The CUDA backend: device and pinned memory, streams and events, async copies, and op dispatch
// to cuBLASLt (cuda_gemm.cpp), cuDNN (cuda_conv2d.cpp) and the kernels of the .cu files.
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "backend/cuda/cuda_ops.h"
#include "core/alignment.h"
#include "core/env.h"

namespace hr {
namespace cuda {

namespace {
std::string_view call_name(const char* call) {
  std::string_view v(call);
  return v.substr(0, v.find('('));
}
}  // namespace

Status cuda_status(cudaError_t e, const char* op, const char* call) {
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::OUT_OF_MEMORY : ErrorCode::INTERNAL;
  return make_error(code, "{}: {} failed: {} ({})", op, call_name(call), cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

Status cublas_status(cublasStatus_t e, const char* op, const char* call) {
  ErrorCode code = e == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::OUT_OF_MEMORY
                   : e == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::UNSUPPORTED
                                                      : ErrorCode::INTERNAL;
  return make_error(code, "{}: {} failed: cuBLAS status {}", op, call_name(call), int(e));
}

Status cudnn_status(cudnnStatus_t e, const char* op, const char* call) {
  ErrorCode code = e == CUDNN_STATUS_ALLOC_FAILED ? ErrorCode::OUT_OF_MEMORY
                   : e == CUDNN_STATUS_NOT_SUPPORTED ? ErrorCode::UNSUPPORTED
                                                     : ErrorCode::INTERNAL;
  return make_error(code, "{}: {} failed: {}", op, call_name(call), cudnnGetErrorString(e));
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return v;
  }();
  return n;
}

}  // namespace cuda

namespace {

using cuda::cuda_status;

class CudaStream final : public Stream {
 public:
  explicit CudaStream(cudaStream_t s) : s_(s) {}
  ~CudaStream() override {
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cudaEvent_t e) : e_(e) {}
  ~CudaEvent() override {
    if (e_) cudaEventDestroy(e_);
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_;
};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_compute(DType t) { return is_float(t) || t == DType::I32 || t == DType::I64; }

// params.kv_window attention (Note [stacked context projections] in graph/pass_stack.cpp): the
// windows' width, and Q, K and V as dense tensors of that width.
int64_t attention_window_width(const OpParams& p, std::span<const TensorDesc> in) {
  return p.q_width > 0 ? p.q_width : in[0].shape[2];
}
std::array<TensorDesc, 3> attention_window_dense(const OpParams& p,
                                                 std::span<const TensorDesc> in) {
  const Shape& q = in[0].shape;
  const int64_t w = attention_window_width(p, in);
  const TensorDesc qd{in[0].dtype, Shape{q[0], q[1], w}};
  const TensorDesc kv{in[0].dtype, Shape{q[0], in[1].shape[1], w}};
  return {qd, kv, kv};
}

// Bytes of the dense copies the gathering path makes (K and V, and Q when it is a window too),
// each rounded up to kDeviceAlignment; `at` gets their offsets in the workspace.
size_t attention_window_gather_bytes(const OpParams& p, std::span<const TensorDesc> in,
                                     std::array<size_t, 3>* at = nullptr) {
  const std::array<TensorDesc, 3> d = attention_window_dense(p, in);
  size_t n = 0;
  for (int i = 0; i < 3; ++i) {
    if (at) (*at)[size_t(i)] = n;
    if (i == 0 && p.q_width <= 0) continue;
    n += align_up(d[size_t(i)].bytes());
  }
  return n;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) { ctx_.device = index; }

  ~CudaBackend() override {
    cudaSetDevice(ctx_.device);
    if (default_stream_) cudaStreamSynchronize(default_stream_->get());
    if (ctx_.dnn) cudnnDestroy(ctx_.dnn);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
    if (error_flag_host_) cudaFreeHost(error_flag_host_);
  }

  Status init() {
    const char* op = "cuda backend";
    HR_CUDA_CHECK(op, cudaSetDevice(ctx_.device));
    cudaDeviceProp prop{};
    HR_CUDA_CHECK(op, cudaGetDeviceProperties(&prop, ctx_.device));
    name_ = prop.name;
    ctx_.fp8_gemm = prop.major * 10 + prop.minor >= 89;
    cudaStream_t s = nullptr;
    HR_CUDA_CHECK(op, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    default_stream_ = std::make_unique<CudaStream>(s);
    HR_CUBLAS_CHECK(op, cublasLtCreate(&ctx_.lt));
    HR_CUDNN_CHECK(op, cudnnCreate(&ctx_.dnn));
    // Note [deferred op errors] (cuda_common.h): a word of host memory the kernels can write.
    HR_CUDA_CHECK(op, cudaHostAlloc(reinterpret_cast<void**>(&error_flag_host_), sizeof(int),
                                    cudaHostAllocMapped | cudaHostAllocPortable));
    *error_flag_host_ = 0;
    HR_CUDA_CHECK(op, cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_flag_dev_),
                                               error_flag_host_, 0));
    return Status();
  }

  DeviceInfo info() const override {
    DeviceInfo d;
    d.name = name_;
    d.kind = "cuda";
    d.index = ctx_.device;
    size_t free = 0, total = 0;
    cudaSetDevice(ctx_.device);
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      d.memory_total = total;
      d.memory_free = free;
    } else {
      cudaGetLastError();
    }
    return d;
  }
  // Note [device properties]
  bool memory_is_host() const override { return false; }
  TorchGenerator torch_generator() const override { return TorchGenerator::CUDA_PHILOX; }

  Result<void*> device_alloc(size_t bytes) override {
    cudaSetDevice(ctx_.device);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure must not poison later calls
      return make_error(e == cudaErrorMemoryAllocation ? ErrorCode::OUT_OF_MEMORY : ErrorCode::INTERNAL,
                        "cudaMalloc of {} bytes on {} (device {}) failed: {}", bytes, name_,
                        ctx_.device, cudaGetErrorString(e));
    }
    return p;
  }
  void device_free(void* p) override {
    if (p) cudaFree(p);
  }
  Result<void*> host_alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 256, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return make_error(ErrorCode::OUT_OF_MEMORY, "cudaHostAlloc of {} pinned bytes failed: {}",
                        bytes, cudaGetErrorString(e));
    }
    return p;
  }
  void host_free_pinned(void* p) override {
    if (p) cudaFreeHost(p);
  }
  bool host_pinned(const void* p) const override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  }

  Stream* default_stream() override { return default_stream_.get(); }
  Result<std::unique_ptr<Stream>> stream_create() override {
    cudaSetDevice(ctx_.device);
    cudaStream_t s = nullptr;
    HR_CUDA_CHECK("stream_create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::unique_ptr<Stream>(new CudaStream(s));
  }
  Status stream_sync(Stream* s) override {
    HR_CUDA_CHECK("stream_sync", cudaStreamSynchronize(get(s)));
    return deferred_errors();
  }
  Status device_sync() override {
    cudaSetDevice(ctx_.device);
    HR_CUDA_CHECK("device_sync", cudaDeviceSynchronize());
    return deferred_errors();
  }
  Result<std::unique_ptr<Event>> event_create() override {
    cudaSetDevice(ctx_.device);
    cudaEvent_t e = nullptr;
    HR_CUDA_CHECK("event_create", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return std::unique_ptr<Event>(new CudaEvent(e));
  }
  Result<std::unique_ptr<Event>> timing_event_create() override {
    cudaSetDevice(ctx_.device);
    cudaEvent_t e = nullptr;
    HR_CUDA_CHECK("timing_event_create", cudaEventCreateWithFlags(&e, cudaEventDefault));
    return std::unique_ptr<Event>(new CudaEvent(e));
  }
  Result<double> event_elapsed_ms(Event* a, Event* b) override {
    float ms = 0;
    HR_CUDA_CHECK("event_elapsed_ms", cudaEventElapsedTime(&ms, static_cast<CudaEvent*>(a)->get(),
                                                            static_cast<CudaEvent*>(b)->get()));
    return double(ms);
  }
  Status event_record(Event* e, Stream* s) override {
    HR_CUDA_CHECK("event_record", cudaEventRecord(static_cast<CudaEvent*>(e)->get(), get(s)));
    return Status();
  }
  Status stream_wait_event(Stream* s, Event* e) override {
    HR_CUDA_CHECK("stream_wait_event", cudaStreamWaitEvent(get(s), static_cast<CudaEvent*>(e)->get(), 0));
    return Status();
  }
  Status event_sync(Event* e) override {
    HR_CUDA_CHECK("event_sync", cudaEventSynchronize(static_cast<CudaEvent*>(e)->get()));
    return deferred_errors();
  }

  Status copy_h2d(void* d, const void* src, size_t n, Stream* s) override {
    if (n) HR_CUDA_CHECK("copy_h2d", cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, get(s)));
    return Status();
  }
  Status copy_d2h(void* d, const void* src, size_t n, Stream* s) override {
    if (n) HR_CUDA_CHECK("copy_d2h", cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToHost, get(s)));
    return Status();
  }
  Status copy_d2d(void* d, const void* src, size_t n, Stream* s) override {
    if (n && d != src) HR_CUDA_CHECK("copy_d2d", cuda::copy_2d(d, n, src, n, n, 1, get(s)));
    return Status();
  }
  Status memset_zero(void* d, size_t n, Stream* s) override {
    if (n) HR_CUDA_CHECK("memset_zero", cudaMemsetAsync(d, 0, n, get(s)));
    return Status();
  }

  DType compute_dtype_default() const override { return DType::F16; }
  bool prefers_channels_last(DType t) const override {
    return t == DType::F16 || t == DType::BF16;
  }
  bool prefers_stacked_weights() const override { return true; }
  bool runs_fp8_gemm() const override { return ctx_.fp8_gemm; }
  bool op_supported(OpKind kind, DType dtype) const override {
    switch (kind) {
      case OpKind::CONCAT:
      case OpKind::SLICE:
      case OpKind::PERMUTE:
      case OpKind::RESHAPE:
      case OpKind::COPY:
      case OpKind::UPSAMPLE_NEAREST: {
        size_t es = dtype_size(dtype);
        return es == 1 || es == 2 || es == 4 || es == 8;
      }
      case OpKind::CAST:  // from fp8 too (Note [fp8 weights] in graph/graph.h)
        return is_compute(dtype) || dtype_is_fp8(dtype);
      case OpKind::EMBEDDING: return is_compute(dtype);  // ids i32/i64, tables f32/f16/bf16
      case OpKind::LINEAR_FP8:  // fp8 operands, an f32 scale, a 16-bit output and bias
        return ctx_.fp8_gemm && (dtype == DType::F8_E4M3 || dtype == DType::F32 ||
                                 dtype == DType::F16 || dtype == DType::BF16);
      case OpKind::COUNT_: return false;
      default: return is_float(dtype);  // compute ops; TIMESTEP_EMBEDDING's input and
                                        // ROPE's table are f32
    }
  }

  size_t op_workspace(OpKind kind, const OpParams& p, std::span<const TensorDesc> in,
                      const TensorDesc& out) const override {
    switch (kind) {
      case OpKind::LINEAR:
      case OpKind::LINEAR_FP8:
      case OpKind::MATMUL: return cuda::kGemmWorkspace;
      case OpKind::CONV2D:
        cudaSetDevice(ctx_.device);
        return cuda::conv2d_workspace(ctx_, p, in, out);
      case OpKind::GROUP_NORM: {
        if (!p.channels_last || in.empty() || in[0].shape.rank < 2) return 0;
        const Shape& sh = in[0].shape;
        return cuda::group_norm_nhwc_plan(sh[0], sh.prod(1, sh.rank - 1), sh[-1], p.groups).workspace();
      }
      case OpKind::ATTENTION: {
        if (in.size() != 3 || in[0].shape.rank != 3 || p.heads < 1) return 0;
        if (p.kv_window) {  // room to gather densely, then the dense attention's or the
                            // strided cuDNN plan's, whichever is larger
          const std::array<TensorDesc, 3> dense = attention_window_dense(p, in);
          OpParams q = p;
          q.kv_window = false;
          q.q_start = q.q_width = 0;
          size_t inner = op_workspace(kind, q, dense, out);
          const int64_t w = dense[0].shape[2], d = w / p.heads;
          cudaSetDevice(ctx_.device);
          if (const cuda::DnnAttentionPlan* plan = cuda::attention_dnn_for(
                  ctx_, in[0].dtype, in[0].shape[0], in[0].shape[1], in[1].shape[1], p.heads, d,
                  d, p.causal, p.q_width > 0 ? in[0].shape[2] : 0, in[1].shape[2], in[2].shape[2]))
            inner = std::max(inner, plan->workspace);
          return attention_window_gather_bytes(p, in) + inner;
        }
        int64_t d = in[0].shape[2] / p.heads, dv = in[2].shape[2] / p.heads;
        cudaSetDevice(ctx_.device);
        if (const cuda::DnnAttentionPlan* plan =
                cuda::attention_dnn_for(ctx_, in[0].dtype, in[0].shape[0], in[0].shape[1],
                                        in[1].shape[1], p.heads, d, dv, p.causal))
          return plan->workspace;
        if (!cuda::attention_gemm_applies(in[0].dtype, p.heads, d, dv, p.causal)) return 0;
        return cuda::attention_gemm_workspace(in[0].dtype, in[0].shape[1], in[1].shape[1]);
      }
      default: return 0;
    }
  }

  Status op_run(const OpCall& c, Stream* st) override;

  // Note [captured steps]: a planned graph's ops are recorded once into a CUDA graph and
  // replayed with one launch; the executor keeps arena and weight pointers fixed meanwhile.
  bool capture_supported() const override { return true; }
  Status capture_begin(Stream* st) override {
    cudaSetDevice(ctx_.device);
    cudaError_t e = cudaStreamBeginCapture(get(st), cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
      return make_error(ErrorCode::INTERNAL, "cudaStreamBeginCapture: {}", cudaGetErrorString(e));
    return Status();
  }
  Result<std::unique_ptr<CapturedWork>> capture_end(Stream* st) override {
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(get(st), &graph);
    if (e != cudaSuccess || !graph) {
      (void)cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      return make_error(ErrorCode::UNSUPPORTED, "cudaStreamEndCapture: {}", cudaGetErrorString(e));
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return make_error(ErrorCode::UNSUPPORTED, "cudaGraphInstantiate: {}", cudaGetErrorString(e));
    }
    return std::unique_ptr<CapturedWork>(new CudaCaptured(exec));
  }
  Status captured_launch(CapturedWork* w, Stream* st) override {
    cudaError_t e = cudaGraphLaunch(static_cast<CudaCaptured*>(w)->exec, get(st));
    if (e != cudaSuccess)
      return make_error(ErrorCode::INTERNAL, "cudaGraphLaunch: {}", cudaGetErrorString(e));
    return Status();
  }

 private:
  struct CudaCaptured final : CapturedWork {
    explicit CudaCaptured(cudaGraphExec_t e) : exec(e) {}
    ~CudaCaptured() override {
      if (exec) cudaGraphExecDestroy(exec);
    }
    cudaGraphExec_t exec = nullptr;
  };

  cudaStream_t get(Stream* s) const {
    return static_cast<CudaStream*>(s ? s : default_stream_.get())->get();
  }
  // Note [deferred op errors]
  Status deferred_errors() {
    volatile int* flag = error_flag_host_;
    if (flag && *flag) {
      *flag = 0;
      return Status(ErrorCode::INVALID_ARGUMENT,
                    "embedding: an id outside [0, vocabulary) was looked up (its row was written "
                    "as zeros)");
    }
    return Status();
  }
  Status run_layout(const OpCall& c, const OpParams& p, cudaStream_t s);
  Status run_attention_window(const OpCall& c, const OpParams& p, cudaStream_t s);
  Status run_compute(const OpCall& c, const OpParams& p, cudaStream_t s);

  mutable cuda::CudaContext ctx_;
  std::string name_;
  std::unique_ptr<CudaStream> default_stream_;
  int* error_flag_host_ = nullptr;
  int* error_flag_dev_ = nullptr;
};

// params.kv_window: the v2 tensor-core kernels and cuDNN's attention read the windows in place
// (row pitch = the wide tensors' widths); any other path gets dense copies of them in the
// workspace first.
Status CudaBackend::run_attention_window(const OpCall& c, const OpParams& p, cudaStream_t s) {
  const char* opn = "attention";
  const TensorRef &qr = c.inputs[0], &kr = c.inputs[1], &vr = c.inputs[2];
  const std::array<TensorDesc, 3> in{qr.desc, kr.desc, vr.desc};
  const Shape& q = qr.desc.shape;
  const int64_t w = attention_window_width(p, in), nk = kr.desc.shape[1];
  const size_t es = dtype_size(qr.desc.dtype);
  const std::array<const char*, 3> win{
      static_cast<const char*>(qr.data) + size_t(p.q_width > 0 ? p.q_start : 0) * es,
      static_cast<const char*>(kr.data) + size_t(p.start) * es,
      static_cast<const char*>(vr.data) + size_t(p.end) * es};
  const std::array<int64_t, 3> pitch{p.q_width > 0 ? q[2] : 0, kr.desc.shape[2], vr.desc.shape[2]};
  if (q[1] > 0 && nk > 0 && q[0] <= 65535 && p.heads <= 65535 &&
      q[1] <= std::numeric_limits<int32_t>::max() && nk <= std::numeric_limits<int32_t>::max()) {
    cuda::AttentionArgs a;
    a.dtype = qr.desc.dtype;
    a.q = win[0];
    a.k = win[1];
    a.v = win[2];
    a.o = c.output.data;
    a.b = int(q[0]);
    a.nq = int(q[1]);
    a.nk = int(nk);
    a.heads = p.heads;
    a.d = a.dv = int(w / p.heads);
    a.ldq = pitch[0];
    a.ldk = pitch[1];
    a.ldv = pitch[2];
    a.scale = p.alpha != 0.0f ? p.alpha : 1.0f / std::sqrt(float(a.d));
    a.causal = p.causal;
    if (cuda::attention_dnn_applies(a.dtype, a.nq, a.nk, a.d, a.dv, a.causal)) {
      const cuda::DnnAttentionPlan* plan = cuda::attention_dnn_for(
          ctx_, a.dtype, a.b, a.nq, a.nk, a.heads, a.d, a.dv, a.causal, pitch[0], pitch[1], pitch[2]);
      const bool aligned = ((reinterpret_cast<uintptr_t>(win[0]) | reinterpret_cast<uintptr_t>(win[1]) |
                             reinterpret_cast<uintptr_t>(win[2])) % 16) == 0;
      if (plan && aligned && c.workspace_bytes >= plan->workspace) {
        const std::array<TensorRef, 3> refs{TensorRef{qr.desc, const_cast<char*>(win[0])},
                                            TensorRef{kr.desc, const_cast<char*>(win[1])},
                                            TensorRef{vr.desc, const_cast<char*>(win[2])}};
        OpCall dc = c;
        dc.inputs = refs;
        return cuda::attention_dnn(ctx_, *plan, dc, a.scale, s);
      }
    } else if (cuda::attention_strided_supported(a)) {
      HR_CUDA_CHECK(opn, cuda::attention_tc(a, s));
      return Status();
    }
  }
  std::array<size_t, 3> at{};
  const size_t gather = attention_window_gather_bytes(p, in, &at);
  if (!c.workspace || c.workspace_bytes < gather)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "attention: workspace of {} bytes given, the windows need {}",
                      c.workspace_bytes, gather);
  const std::array<TensorDesc, 3> dense = attention_window_dense(p, in);
  char* ws = static_cast<char*>(c.workspace);
  std::array<TensorRef, 3> refs{qr, TensorRef{dense[1], ws + at[1]}, TensorRef{dense[2], ws + at[2]}};
  if (p.q_width > 0) refs[0] = TensorRef{dense[0], ws + at[0]};
  const size_t row = size_t(w) * es;
  for (int i = p.q_width > 0 ? 0 : 1; i < 3; ++i) {
    const size_t rows = size_t(c.inputs[size_t(i)].desc.shape[0] * c.inputs[size_t(i)].desc.shape[1]);
    const size_t src_pitch = size_t(c.inputs[size_t(i)].desc.shape[2]) * es;
    HR_CUDA_CHECK(opn, cudaMemcpy2DAsync(refs[size_t(i)].data, row, win[size_t(i)], src_pitch, row,
                                         rows, cudaMemcpyDeviceToDevice, s));
  }
  OpParams pd = p;
  pd.kv_window = false;
  pd.q_start = pd.q_width = 0;
  OpCall d = c;
  d.params = &pd;
  d.inputs = refs;
  d.workspace = c.workspace_bytes > gather ? ws + gather : nullptr;
  d.workspace_bytes = c.workspace_bytes - gather;
  return run_compute(d, pd, s);
}

Status CudaBackend::op_run(const OpCall& c, Stream* st) {
  const char* opn = op_name(c.kind);
  const OpParams p = c.params ? *c.params : OpParams();
  for (const TensorRef& t : c.inputs)
    if (!op_supported(c.kind, t.desc.dtype))
      return make_error(ErrorCode::UNSUPPORTED, "cuda backend: {} does not take {} inputs", opn,
                        dtype_name(t.desc.dtype));
  if (!op_supported(c.kind, c.output.desc.dtype))
    return make_error(ErrorCode::UNSUPPORTED, "cuda backend: {} does not produce {}", opn,
                      dtype_name(c.output.desc.dtype));
  HR_CUDA_CHECK(opn, cudaSetDevice(ctx_.device));
  const cudaStream_t s = get(st);
  switch (c.kind) {
    case OpKind::LINEAR: return cuda::linear(ctx_, c, s);
    case OpKind::MATMUL: return cuda::matmul(ctx_, c, s);
    case OpKind::LINEAR_FP8: return cuda::linear_fp8(ctx_, c, s);
    case OpKind::CONV2D: return cuda::conv2d(ctx_, c, s);
    case OpKind::CONCAT:
    case OpKind::SLICE:
    case OpKind::PERMUTE:
    case OpKind::RESHAPE:
    case OpKind::COPY:
    case OpKind::UPSAMPLE_NEAREST:
    case OpKind::CAST:
    case OpKind::EMBEDDING: return run_layout(c, p, s);
    case OpKind::COUNT_: break;
    default: return run_compute(c, p, s);
  }
  return make_error(ErrorCode::UNSUPPORTED, "cuda backend: op {} not implemented", opn);
}

Status CudaBackend::run_compute(const OpCall& c, const OpParams& p, cudaStream_t s) {
  const char* opn = op_name(c.kind);
  const TensorRef& x = c.inputs[0];
  const TensorRef& y = c.output;
  const DType t = x.desc.dtype;
  switch (c.kind) {
    case OpKind::GROUP_NORM: {
      const Shape& sh = x.desc.shape;
      if (p.channels_last) {
        const cuda::GroupNormNhwcPlan pl =
            cuda::group_norm_nhwc_plan(sh[0], sh.prod(1, sh.rank - 1), sh[-1], p.groups);
        if (c.workspace_bytes < pl.workspace() || !c.workspace)
          return make_error(ErrorCode::INVALID_ARGUMENT,
                            "group_norm: workspace of {} bytes given, op_workspace asked for {}",
                            c.workspace_bytes, pl.workspace());
        HR_CUDA_CHECK(opn, cuda::group_norm_nhwc(t, x.data, c.inputs[1].data, c.inputs[2].data,
                                                 y.data, sh[0], sh.prod(1, sh.rank - 1), sh[-1],
                                                 p.groups, p.eps, p.fuse_silu, c.workspace, s));
        return Status();
      }
      HR_CUDA_CHECK(opn, cuda::group_norm(t, x.data, c.inputs[1].data, c.inputs[2].data, y.data, sh[0],
                                          sh[1], sh.prod(2, sh.rank), p.groups, p.eps, p.fuse_silu, s));
      return Status();
    }
    case OpKind::LAYER_NORM: {
      const int64_t ch = x.desc.shape[-1];
      const int64_t rows = ch ? x.desc.numel() / ch : 0;
      HR_CUDA_CHECK(opn, cuda::layer_norm(t, x.data, c.inputs[1].data,
                                          c.inputs.size() > 2 ? c.inputs[2].data : nullptr, y.data,
                                          rows, ch, p.eps, s));
      return Status();
    }
    case OpKind::RMS_NORM: {
      const int64_t ch = x.desc.shape[-1];
      const int64_t rows = ch ? x.desc.numel() / ch : 0;
      HR_CUDA_CHECK(opn, cuda::rms_norm(t, x.data, c.inputs.size() > 1 ? c.inputs[1].data : nullptr,
                                        y.data, rows, ch, p.eps, s));
      return Status();
    }
    case OpKind::ROPE: {
      const Shape& xs = x.desc.shape;
      HR_CUDA_CHECK(opn, cuda::rope(t, x.data, c.inputs[1].as<const float>(), y.data, xs[0], xs[1],
                                    xs[2], xs[3], c.inputs[1].desc.shape.rank == 4,
                                    p.rope_half_split, s));
      return Status();
    }
    case OpKind::QKV_ROPE: {
      const int n = int(c.inputs.size() / 3);
      if (n > cuda::kQkvRopeMaxGroups)
        return make_error(ErrorCode::UNSUPPORTED, "qkv_rope: {} streams (at most {})", n,
                          cuda::kQkvRopeMaxGroups);
      cuda::QkvRopeGroup groups[cuda::kQkvRopeMaxGroups];
      for (int i = 0; i < n; ++i) {
        const TensorRef& xi = c.inputs[size_t(3 * i)];
        groups[i] = {xi.data, c.inputs[size_t(3 * i + 1)].data, c.inputs[size_t(3 * i + 2)].data,
                     xi.desc.shape[1], xi.desc.shape[2], 0};
      }
      HR_CUDA_CHECK(opn, cuda::qkv_rope(t, groups, n, c.inputs.back().as<const float>(), y.data,
                                        x.desc.shape[0], p.heads, p.dim, p.eps, p.rope_half_split,
                                        s));
      return Status();
    }
    case OpKind::SOFTMAX: {
      const int64_t n = x.desc.shape[-1];
      const int64_t rows = n ? x.desc.numel() / n : 0;
      if (rows > std::numeric_limits<int32_t>::max())
        return make_error(ErrorCode::UNSUPPORTED, "softmax: {} rows exceed one launch", rows);
      HR_CUDA_CHECK(opn, cuda::softmax(t, x.data, y.data, rows, n, p.alpha != 0.0f ? p.alpha : 1.0f, s));
      return Status();
    }
    case OpKind::ATTENTION: {
      if (p.kv_window) return run_attention_window(c, p, s);
      const Shape& q = x.desc.shape;
      const Shape& k = c.inputs[1].desc.shape;
      const Shape& v = c.inputs[2].desc.shape;
      cuda::AttentionArgs a;
      a.dtype = t;
      a.q = x.data;
      a.k = c.inputs[1].data;
      a.v = c.inputs[2].data;
      a.o = y.data;
      a.b = int(q[0]);
      a.nq = int(q[1]);
      a.nk = int(k[1]);
      a.heads = p.heads;
      a.d = int(q[2] / p.heads);
      a.dv = int(v[2] / p.heads);
      a.scale = p.alpha != 0.0f ? p.alpha : 1.0f / std::sqrt(float(a.d));
      a.causal = p.causal;
      if (!cuda::attention_supported(a.d, a.dv))
        return make_error(ErrorCode::UNSUPPORTED,
                          "attention: head dims {} and {} (the CUDA kernel takes multiples of 4 up to {})",
                          a.d, a.dv, cuda::kAttentionMaxDim);
      if (q[0] > 65535 || p.heads > 65535 || q[1] > std::numeric_limits<int32_t>::max() ||
          k[1] > std::numeric_limits<int32_t>::max())
        return make_error(ErrorCode::UNSUPPORTED, "attention: shape {} too large for one launch",
                          q.str());
      if (a.nk == 0) {
        HR_CUDA_CHECK(opn, cudaMemsetAsync(y.data, 0, y.desc.bytes(), s));
        return Status();
      }
      // Note [cuDNN attention]
      if (const cuda::DnnAttentionPlan* plan = cuda::attention_dnn_for(
              ctx_, t, a.b, a.nq, a.nk, a.heads, a.d, a.dv, a.causal);
          plan && c.workspace_bytes >= plan->workspace)
        return cuda::attention_dnn(ctx_, *plan, c, a.scale, s);
      if (cuda::attention_gemm_applies(t, a.heads, a.d, a.dv, a.causal))
        return cuda::attention_gemm(ctx_, c, a.scale, s);
      HR_CUDA_CHECK(opn, cuda::attention(a, s));
      return Status();
    }
    case OpKind::GELU:
    case OpKind::GELU_TANH:
    case OpKind::QUICK_GELU:
    case OpKind::SILU:
    case OpKind::TANH:
    case OpKind::SCALE: {
      cuda::UnaryOp u = c.kind == OpKind::GELU        ? cuda::UnaryOp::GELU
                        : c.kind == OpKind::GELU_TANH  ? cuda::UnaryOp::GELU_TANH
                        : c.kind == OpKind::QUICK_GELU ? cuda::UnaryOp::QUICK_GELU
                        : c.kind == OpKind::SILU       ? cuda::UnaryOp::SILU
                        : c.kind == OpKind::TANH       ? cuda::UnaryOp::TANH
                                                       : cuda::UnaryOp::SCALE;
      HR_CUDA_CHECK(opn, cuda::unary(u, t, x.data, y.data, x.desc.numel(), p.alpha, p.beta, s));
      return Status();
    }
    case OpKind::GEGLU: {
      const int64_t n = y.desc.shape[-1];
      HR_CUDA_CHECK(opn, cuda::geglu(t, x.data, y.data, n ? y.desc.numel() / n : 0, n, s));
      return Status();
    }
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV: {
      cuda::BinaryOp b = c.kind == OpKind::ADD   ? cuda::BinaryOp::ADD
                         : c.kind == OpKind::SUB ? cuda::BinaryOp::SUB
                         : c.kind == OpKind::MUL ? cuda::BinaryOp::MUL
                                                 : cuda::BinaryOp::DIV;
      HR_CUDA_CHECK(opn, cuda::binary(b, t, x.data, x.desc.shape, c.inputs[1].data,
                                      c.inputs[1].desc.shape, y.data, y.desc.shape, s));
      return Status();
    }
    case OpKind::TIMESTEP_EMBEDDING: {
      const int64_t half = p.dim / 2;
      // As the CPU reference: the Python scalars are doubles rounded to f32.
      const float neg_log = float(-std::log(double(p.max_period)));
      const float denom = float(double(half) - double(p.freq_shift));
      HR_CUDA_CHECK(opn, cuda::timestep_embedding(x.as<const float>(), x.desc.shape[0], p.dim, neg_log,
                                                  denom, p.flip_sin_to_cos, y.desc.dtype, y.data, s));
      return Status();
    }
    default: break;
  }
  return make_error(ErrorCode::UNSUPPORTED, "cuda backend: op {} not implemented", opn);
}

Status CudaBackend::run_layout(const OpCall& c, const OpParams& p, cudaStream_t s) {
  const char* opn = op_name(c.kind);
  const TensorRef& x = c.inputs[0];
  const TensorRef& y = c.output;
  const size_t es = dtype_size(x.desc.dtype);
  switch (c.kind) {
    case OpKind::RESHAPE:
    case OpKind::COPY:
      if (y.data != x.data && y.desc.bytes())
        HR_CUDA_CHECK(opn, cuda::copy_2d(y.data, y.desc.bytes(), x.data, y.desc.bytes(), y.desc.bytes(), 1, s));
      return Status();
    case OpKind::CAST:
      if (c.inputs.size() == 2) {
        HR_CUDA_CHECK(opn, cuda::cast_scaled(x.desc.dtype, x.data,
                                             static_cast<const float*>(c.inputs[1].data),
                                             y.desc.dtype, y.data, x.desc.numel(), s));
        return Status();
      }
      if (x.desc.dtype == y.desc.dtype) {
        if (y.data != x.data && y.desc.bytes())
          HR_CUDA_CHECK(opn, cuda::copy_2d(y.data, y.desc.bytes(), x.data, y.desc.bytes(), y.desc.bytes(), 1, s));
        return Status();
      }
      HR_CUDA_CHECK(opn, cuda::cast(x.desc.dtype, x.data, y.desc.dtype, y.data, x.desc.numel(), s));
      return Status();
    case OpKind::CONCAT: {
      const Shape& os = y.desc.shape;
      const int axis = p.axis < 0 ? p.axis + os.rank : p.axis;
      const int64_t outer = os.prod(0, axis), inner = os.prod(axis + 1, os.rank);
      const size_t out_row = size_t(os.dims[axis] * inner) * es;
      size_t offset = 0;
      // One 2-D copy per input: `outer` rows of its slab into the output's wider rows.
      for (const TensorRef& in : c.inputs) {
        const size_t in_row = size_t(in.desc.shape.dims[axis] * inner) * es;
        if (in_row && outer)
          HR_CUDA_CHECK(opn, cuda::copy_2d(static_cast<uint8_t*>(y.data) + offset, out_row, in.data,
                                           in_row, in_row, size_t(outer), s));
        offset += in_row;
      }
      return Status();
    }
    case OpKind::SLICE: {
      const Shape& is = x.desc.shape;
      const int axis = p.axis < 0 ? p.axis + is.rank : p.axis;
      const int64_t outer = is.prod(0, axis), inner = is.prod(axis + 1, is.rank);
      const int64_t in_dim = is.dims[axis], out_dim = y.desc.shape.dims[axis];
      if (out_dim == 0 || outer == 0 || inner == 0) return Status();
      if (p.step == 1) {
        const size_t row = size_t(out_dim * inner) * es;
        HR_CUDA_CHECK(opn, cuda::copy_2d(y.data, row,
                                         static_cast<const uint8_t*>(x.data) + size_t(p.start * inner) * es,
                                         size_t(in_dim * inner) * es, row, size_t(outer), s));
        return Status();
      }
      HR_CUDA_CHECK(opn, cuda::slice_strided(es, x.data, outer, in_dim, inner, p.start, p.step, out_dim,
                                             y.data, s));
      return Status();
    }
    case OpKind::PERMUTE:
      HR_CUDA_CHECK(opn, cuda::permute(es, x.data, x.desc.shape, p.perm, y.data, s));
      return Status();
    case OpKind::UPSAMPLE_NEAREST: {
      const Shape& is = x.desc.shape;
      if (p.channels_last) {
        HR_CUDA_CHECK(opn, cuda::upsample_nearest_nhwc(es, x.data, is[0], is[1], is[2], is[3],
                                                       p.factor, y.data, s));
        return Status();
      }
      HR_CUDA_CHECK(opn, cuda::upsample_nearest(es, x.data, is[0] * is[1], is[2], is[3], p.factor,
                                                y.data, s));
      return Status();
    }
    case OpKind::EMBEDDING: {
      const TensorRef& table = c.inputs[1];
      const size_t row_bytes = size_t(table.desc.shape[1]) * dtype_size(table.desc.dtype);
      HR_CUDA_CHECK(opn, cuda::embedding(x.desc.dtype, x.data, x.desc.numel(), row_bytes, table.data,
                                         table.desc.shape[0], y.data, error_flag_dev_, s));
      return Status();
    }
    default: break;
  }
  return make_error(ErrorCode::UNSUPPORTED, "cuda backend: op {} not implemented", opn);
}

}  // namespace

Result<std::unique_ptr<Backend>> cuda_backend_create(int index) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::NOT_FOUND, "no CUDA device: cudaGetDeviceCount failed: {} ({})",
                      cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (count == 0) return Status(ErrorCode::NOT_FOUND, "no CUDA device: cudaGetDeviceCount found none");
  if (index < 0 || index >= count)
    return make_error(ErrorCode::NOT_FOUND, "no CUDA device {}: {} device(s) present", index, count);
  auto backend = std::make_unique<CudaBackend>(index);
  HR_TRY(backend->init());
  return std::unique_ptr<Backend>(std::move(backend));
}

bool cuda_backend_built() { return true; }

}  // namespace hr
