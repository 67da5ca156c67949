// The CPU backend: host memory as "device" memory, synchronous streams, op dispatch.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/alignment.h"

extern "C" void openblas_set_num_threads(int);

namespace hr {
namespace {

class CpuStream final : public Stream {};
// Work on the CPU runs when it is issued, so an event's time is the moment it is recorded.
class CpuEvent final : public Event {
 public:
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    threads_ = threads > 0 ? threads : int(std::thread::hardware_concurrency());
    if (threads_ < 1) threads_ = 1;
    omp_set_num_threads(threads_);
    openblas_set_num_threads(threads_);
  }

  DeviceInfo info() const override {
    DeviceInfo d;
    d.name = fmt::format("cpu ({} threads)", threads_);
    d.kind = "cpu";
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    d.memory_total = uint64_t(pages) * uint64_t(page);
    d.memory_free = uint64_t(avail) * uint64_t(page);
    return d;
  }
  bool memory_is_host() const override { return true; }  // Note [device properties]

  Result<void*> device_alloc(size_t bytes) override {
    size_t rounded = align_up(bytes);
    void* p = std::aligned_alloc(kDeviceAlignment, rounded ? rounded : kDeviceAlignment);
    if (!p) return make_error(ErrorCode::OUT_OF_MEMORY, "host allocation of {} bytes failed", bytes);
    return p;
  }
  void device_free(void* p) override { std::free(p); }
  Result<void*> host_alloc_pinned(size_t bytes) override { return device_alloc(bytes); }
  void host_free_pinned(void* p) override { std::free(p); }

  Stream* default_stream() override { return &default_stream_; }
  Result<std::unique_ptr<Stream>> stream_create() override {
    return std::unique_ptr<Stream>(new CpuStream());
  }
  Status stream_sync(Stream*) override { return Status(); }
  Result<std::unique_ptr<Event>> event_create() override {
    return std::unique_ptr<Event>(new CpuEvent());
  }
  Result<std::unique_ptr<Event>> timing_event_create() override { return event_create(); }
  Result<double> event_elapsed_ms(Event* a, Event* b) override {
    auto* x = static_cast<CpuEvent*>(a);
    auto* y = static_cast<CpuEvent*>(b);
    if (!x->recorded || !y->recorded)
      return make_error(ErrorCode::INVALID_ARGUMENT, "event_elapsed_ms: an event was never recorded");
    return std::chrono::duration<double, std::milli>(y->at - x->at).count();
  }
  Status event_record(Event* e, Stream*) override {
    auto* x = static_cast<CpuEvent*>(e);
    x->at = std::chrono::steady_clock::now();
    x->recorded = true;
    return Status();
  }
  Status stream_wait_event(Stream*, Event*) override { return Status(); }
  Status event_sync(Event*) override { return Status(); }

  // Work on the CPU is synchronous, so every stream is already ordered.
  Status copy_h2d(void* d, const void* s, size_t n, Stream*) override { return copy(d, s, n); }
  Status copy_d2h(void* d, const void* s, size_t n, Stream*) override { return copy(d, s, n); }
  Status copy_d2d(void* d, const void* s, size_t n, Stream*) override { return copy(d, s, n); }
  Status memset_zero(void* d, size_t n, Stream*) override {
    if (n) std::memset(d, 0, n);
    return Status();
  }

  bool op_supported(OpKind kind, DType dtype) const override {
    switch (kind) {
      case OpKind::CONCAT:
      case OpKind::SLICE:
      case OpKind::PERMUTE:
      case OpKind::RESHAPE:
      case OpKind::COPY:
      case OpKind::CAST:
      case OpKind::UPSAMPLE_NEAREST:
        return true;
      case OpKind::EMBEDDING:
        return dtype == DType::I32 || dtype == DType::I64 || dtype == DType::F32;
      case OpKind::TIMESTEP_EMBEDDING:
        return dtype == DType::F32;
      case OpKind::LINEAR_FP8:  // the reference: fp8 operands, any float output
        return dtype == DType::F8_E4M3 || dtype == DType::F32 || dtype == DType::F16 ||
               dtype == DType::BF16;
      // ROPE's and QKV_ROPE's tables are f32 whatever x's dtype: the default case.
      default:
        return dtype == DType::F32;
    }
  }

  size_t op_workspace(OpKind kind, const OpParams& p, std::span<const TensorDesc> in,
                      const TensorDesc& out) const override {
    switch (kind) {
      case OpKind::CONV2D: return cpu::conv2d_variant_workspace(p, in, out);
      case OpKind::GROUP_NORM: return cpu::group_norm_variant_workspace(p, in, out);
      case OpKind::ATTENTION: return cpu::attention_workspace(p, in, out);
      default: return 0;
    }
  }

  Status op_run(const OpCall& c, Stream*) override {
    switch (c.kind) {
      case OpKind::LINEAR: return cpu::linear_variant(c);
      case OpKind::LINEAR_FP8: return cpu::linear_fp8(c);
      case OpKind::MATMUL: return cpu::matmul(c);
      case OpKind::CONV2D: return cpu::conv2d_variant(c);
      case OpKind::GROUP_NORM: return cpu::group_norm_variant(c);
      case OpKind::LAYER_NORM: return cpu::layer_norm(c);
      case OpKind::SOFTMAX: return cpu::softmax(c);
      case OpKind::ATTENTION: return cpu::attention(c);
      case OpKind::GELU:
      case OpKind::GELU_TANH:
      case OpKind::QUICK_GELU:
      case OpKind::SILU:
      case OpKind::TANH:
      case OpKind::SCALE: return cpu::unary(c);
      case OpKind::GEGLU: return cpu::geglu(c);
      case OpKind::ADD:
      case OpKind::SUB:
      case OpKind::MUL:
      case OpKind::DIV: return cpu::binary(c);
      case OpKind::CONCAT: return cpu::concat(c);
      case OpKind::SLICE: return cpu::slice(c);
      case OpKind::PERMUTE: return cpu::permute(c);
      case OpKind::UPSAMPLE_NEAREST: return cpu::upsample_variant(c);
      case OpKind::EMBEDDING: return cpu::embedding(c);
      case OpKind::TIMESTEP_EMBEDDING: return cpu::timestep_embedding(c);
      case OpKind::CAST:
      case OpKind::RESHAPE:
      case OpKind::COPY: return cpu::cast(c);
      case OpKind::RMS_NORM: return cpu::rms_norm(c);
      case OpKind::ROPE: return cpu::rope(c);
      case OpKind::QKV_ROPE: return cpu::qkv_rope(c);
      case OpKind::COUNT_: break;
    }
    return make_error(ErrorCode::UNSUPPORTED, "cpu backend: op {} not implemented", op_name(c.kind));
  }

 private:
  static Status copy(void* d, const void* s, size_t n) {
    if (n && d != s) std::memmove(d, s, n);
    return Status();
  }
  int threads_ = 1;
  CpuStream default_stream_;
};

}  // namespace

std::unique_ptr<Backend> cpu_backend_create(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace hr
