// PlanBackend: the real backend's answers, no work.
#include "backend/plan/plan_backend.h"

#include <sys/mman.h>

#include <mutex>
#include <unordered_map>

namespace hr {

namespace {

class PlanStream final : public Stream {};
class PlanEvent final : public Event {};

// Note [plan memory]: allocations are mappings that reserve no memory. Nothing writes to device
// memory in a plan run except host code on a backend whose memory is host memory (Note [device
// properties] in backend/device.h; it then computes on the arena as it would on the CPU: small
// inputs), so a plan of a model of any size costs address space and a few pages.
class ReservedMemory {
 public:
  ~ReservedMemory() {
    for (const auto& [p, n] : maps_) ::munmap(p, n);
  }
  Result<void*> map(size_t bytes) {
    const size_t n = std::max<size_t>(bytes, 1);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return make_error(ErrorCode::OUT_OF_MEMORY, "plan backend: no address space for {} bytes",
                        bytes);
    std::lock_guard<std::mutex> lock(mu_);
    maps_.emplace(p, n);
    return p;
  }
  void unmap(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = maps_.find(p);
    if (it == maps_.end()) return;
    ::munmap(it->first, it->second);
    maps_.erase(it);
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> maps_;
};

class PlanBackend final : public Backend {
 public:
  explicit PlanBackend(Backend& real) : real_(real) {}

  DeviceInfo info() const override { return real_.info(); }
  bool memory_is_host() const override { return real_.memory_is_host(); }
  TorchGenerator torch_generator() const override { return real_.torch_generator(); }

  Result<void*> device_alloc(size_t bytes) override { return memory_.map(bytes); }
  void device_free(void* p) override { memory_.unmap(p); }
  Result<void*> host_alloc_pinned(size_t bytes) override { return memory_.map(bytes); }
  void host_free_pinned(void* p) override { memory_.unmap(p); }

  Stream* default_stream() override { return &default_stream_; }
  Result<std::unique_ptr<Stream>> stream_create() override {
    return std::unique_ptr<Stream>(std::make_unique<PlanStream>());
  }
  Status stream_sync(Stream*) override { return Status(); }
  Result<std::unique_ptr<Event>> event_create() override {
    return std::unique_ptr<Event>(std::make_unique<PlanEvent>());
  }
  Status event_record(Event*, Stream*) override { return Status(); }
  Status stream_wait_event(Stream*, Event*) override { return Status(); }
  Status event_sync(Event*) override { return Status(); }

  Status copy_h2d(void*, const void*, size_t, Stream*) override { return Status(); }
  Status copy_d2h(void*, const void*, size_t, Stream*) override { return Status(); }
  Status copy_d2d(void*, const void*, size_t, Stream*) override { return Status(); }
  Status memset_zero(void*, size_t, Stream*) override { return Status(); }

  bool op_supported(OpKind kind, DType dtype) const override {
    return real_.op_supported(kind, dtype);
  }
  DType compute_dtype_default() const override { return real_.compute_dtype_default(); }
  bool prefers_channels_last(DType dtype) const override {
    return real_.prefers_channels_last(dtype);
  }
  bool prefers_stacked_weights() const override { return real_.prefers_stacked_weights(); }
  bool runs_fp8_gemm() const override { return real_.runs_fp8_gemm(); }
  size_t op_workspace(OpKind kind, const OpParams& params, std::span<const TensorDesc> inputs,
                      const TensorDesc& output) const override {
    return real_.op_workspace(kind, params, inputs, output);
  }
  Status op_run(const OpCall&, Stream*) override { return Status(); }

 private:
  Backend& real_;
  PlanStream default_stream_;
  ReservedMemory memory_;
};

}  // namespace

std::unique_ptr<Backend> plan_backend_create(Backend& real) {
  return std::make_unique<PlanBackend>(real);
}

}  // namespace hr
