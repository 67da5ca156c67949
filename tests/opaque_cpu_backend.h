// OpaqueCpuBackend: the CPU backend presented as a device whose memory the host may not touch,
// for tests of the weight store's upload path (memory/weight_set_test, models/weight_load_test).
#pragma once

#include <memory>
#include <span>

#include "backend/backend.h"

namespace hr {

// The CPU backend presented as a device whose memory the host may not touch, so WeightSet
// takes its upload path. Counts uploads.
class OpaqueCpuBackend final : public Backend {
 public:
  OpaqueCpuBackend() : cpu_(cpu_backend_create(1)) {}
  DeviceInfo info() const override { return cpu_->info(); }
  bool memory_is_host() const override { return false; }
  Result<void*> device_alloc(size_t bytes) override {
    ++allocs;
    return cpu_->device_alloc(bytes);
  }
  void device_free(void* p) override {
    ++frees;
    cpu_->device_free(p);
  }
  Result<void*> host_alloc_pinned(size_t bytes) override { return cpu_->host_alloc_pinned(bytes); }
  void host_free_pinned(void* p) override { cpu_->host_free_pinned(p); }
  Stream* default_stream() override { return cpu_->default_stream(); }
  Result<std::unique_ptr<Stream>> stream_create() override { return cpu_->stream_create(); }
  Status stream_sync(Stream* s) override { return cpu_->stream_sync(s); }
  Result<std::unique_ptr<Event>> event_create() override { return cpu_->event_create(); }
  Status event_record(Event* e, Stream* s) override { return cpu_->event_record(e, s); }
  Status stream_wait_event(Stream* s, Event* e) override { return cpu_->stream_wait_event(s, e); }
  Status event_sync(Event* e) override { return cpu_->event_sync(e); }
  Status copy_h2d(void* d, const void* s, size_t n, Stream* st) override {
    ++uploads;
    return cpu_->copy_h2d(d, s, n, st);
  }
  Status copy_d2h(void* d, const void* s, size_t n, Stream* st) override {
    return cpu_->copy_d2h(d, s, n, st);
  }
  Status copy_d2d(void* d, const void* s, size_t n, Stream* st) override {
    return cpu_->copy_d2d(d, s, n, st);
  }
  Status memset_zero(void* d, size_t n, Stream* s) override { return cpu_->memset_zero(d, n, s); }
  bool op_supported(OpKind kind, DType dtype) const override {
    return cpu_->op_supported(kind, dtype);
  }
  size_t op_workspace(OpKind kind, const OpParams& params, std::span<const TensorDesc> inputs,
                      const TensorDesc& output) const override {
    return cpu_->op_workspace(kind, params, inputs, output);
  }
  Status op_run(const OpCall& call, Stream* s) override { return cpu_->op_run(call, s); }

  int uploads = 0;
  int allocs = 0, frees = 0;

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace hr
