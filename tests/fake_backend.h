// A Backend whose every call reports UNSUPPORTED: tests derive from it and override only the
// calls they exercise (device memory for the allocator, info() for the driver lens).
#pragma once

#include <memory>
#include <span>

#include "backend/backend.h"

namespace hr::test {

class UnsupportedBackend : public Backend {
 public:
  DeviceInfo info() const override { return DeviceInfo{"fake", "fake", 0, 0, 0}; }
  bool memory_is_host() const override { return true; }
  Result<void*> device_alloc(size_t) override { return unsupported(); }
  void device_free(void*) override {}
  Result<void*> host_alloc_pinned(size_t) override { return unsupported(); }
  void host_free_pinned(void*) override {}
  Stream* default_stream() override { return nullptr; }
  Result<std::unique_ptr<Stream>> stream_create() override { return unsupported(); }
  Status stream_sync(Stream*) override { return unsupported(); }
  Result<std::unique_ptr<Event>> event_create() override { return unsupported(); }
  Status event_record(Event*, Stream*) override { return unsupported(); }
  Status stream_wait_event(Stream*, Event*) override { return unsupported(); }
  Status event_sync(Event*) override { return unsupported(); }
  Status copy_h2d(void*, const void*, size_t, Stream*) override { return unsupported(); }
  Status copy_d2h(void*, const void*, size_t, Stream*) override { return unsupported(); }
  Status copy_d2d(void*, const void*, size_t, Stream*) override { return unsupported(); }
  Status memset_zero(void*, size_t, Stream*) override { return unsupported(); }
  bool op_supported(OpKind, DType) const override { return false; }
  size_t op_workspace(OpKind, const OpParams&, std::span<const TensorDesc>,
                      const TensorDesc&) const override {
    return 0;
  }
  Status op_run(const OpCall&, Stream*) override { return unsupported(); }

 protected:
  static Status unsupported() { return Status(ErrorCode::UNSUPPORTED, "fake backend"); }
};

}  // namespace hr::test
