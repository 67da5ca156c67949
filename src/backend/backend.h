// The Backend interface: device memory, pinned host memory, streams and events, async copies
// and the op kernels. `cpu/` is the reference implementation, `cuda/` the GPU one. Adding a
// backend must not touch graph/, models/ or jobs/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/op.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// An ordered queue of work on a backend. Opaque; created by Backend::stream_create.
class Stream {
 public:
  virtual ~Stream() = default;
};

// A marker recorded on a stream; another stream (or the host) can wait for it.
class Event {
 public:
  virtual ~Event() = default;
};

// Work recorded from a stream (a CUDA graph), replayable with one launch.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
};

// One op invocation. Inputs and output point at memory of this backend.
struct OpCall {
  OpKind kind = OpKind::COPY;
  const OpParams* params = nullptr;
  std::span<const TensorRef> inputs;
  TensorRef output;
  void* workspace = nullptr;  // op_workspace() bytes, or null when that is 0
  size_t workspace_bytes = 0;
};

struct DeviceInfo {
  std::string name;          // "cpu (16 threads)", "NVIDIA H200"
  std::string kind;          // "cpu" or "cuda"
  int index = 0;
  uint64_t memory_total = 0;  // bytes (driver level); host RAM for the CPU
  uint64_t memory_free = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual DeviceInfo info() const = 0;
  // True when device memory is ordinary host memory (the CPU backend).
  virtual bool host_visible() const = 0;

  // Raw device memory. Callers go through Allocator (allocator.h), which enforces the budget
  // and keeps statistics; nothing else calls these.
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual void device_free(void* p) = 0;
  // Host memory usable for async copies (page-locked on CUDA).
  virtual Result<void*> host_alloc_pinned(size_t bytes) = 0;
  virtual void host_free_pinned(void* p) = 0;
  // Whether `p` lies in page-locked host memory (a capture may record copies only from such).
  virtual bool host_pinned(const void* p) const { return true; }

  // The stream ops run on when a caller passes nullptr.
  virtual Stream* default_stream() = 0;
  virtual Result<std::unique_ptr<Stream>> stream_create() = 0;
  virtual Status stream_sync(Stream* s) = 0;
  virtual Result<std::unique_ptr<Event>> event_create() = 0;
  virtual Status event_record(Event* e, Stream* s) = 0;
  virtual Status stream_wait_event(Stream* s, Event* e) = 0;
  virtual Status event_sync(Event* e) = 0;
  // Waits for all work queued on every stream (what cudaFree does implicitly); the allocator's
  // weight block cache calls it before handing out a block freed since the last wait (Note
  // [weight block cache] in allocator.cpp). Synchronous backends have nothing to wait for.
  virtual Status device_sync() { return Status(); }
  // Timing events: like event_create, but two of them recorded on one stream give the time
  // between the points where the stream reached them (event_elapsed_ms, after both completed).
  // Backends without timing return UNSUPPORTED.
  virtual Result<std::unique_ptr<Event>> timing_event_create() {
    return Status(ErrorCode::UNSUPPORTED, "this backend has no timing events");
  }
  virtual Result<double> event_elapsed_ms(Event*, Event*) {
    return Status(ErrorCode::UNSUPPORTED, "this backend has no timing events");
  }

  // Async copies ordered on stream s (nullptr = default stream).
  virtual Status copy_h2d(void* dst, const void* src, size_t bytes, Stream* s) = 0;
  virtual Status copy_d2h(void* dst, const void* src, size_t bytes, Stream* s) = 0;
  virtual Status copy_d2d(void* dst, const void* src, size_t bytes, Stream* s) = 0;
  virtual Status memset_zero(void* dst, size_t bytes, Stream* s) = 0;

  // Whether op_run handles `kind` for inputs of this dtype.
  virtual bool op_supported(OpKind kind, DType dtype) const = 0;
  // Whether convolutions of this dtype run faster channels-last (graph passes then lay images
  // out NHWC, Note [graph passes] in graph/passes.h). Every backend runs both layouts.
  virtual bool prefers_channels_last(DType) const { return false; }
  // Scratch bytes op_run needs for this call (counted in the plan).
  virtual size_t op_workspace(OpKind kind, const OpParams& params,
                              std::span<const TensorDesc> inputs,
                              const TensorDesc& output) const = 0;
  // Runs one op. Shapes have been checked by op_infer; the backend checks what only it can
  // (e.g. embedding ids in range) and reports UNSUPPORTED for dtypes it lacks.
  virtual Status op_run(const OpCall& call, Stream* s) = 0;

  // Recording of the work enqueued on `s` between capture_begin and capture_end, for replay
  // with one launch (CUDA graphs). Backends without it return UNSUPPORTED; nothing recorded
  // may allocate, synchronise or copy from pageable host memory.
  virtual bool capture_supported() const { return false; }
  virtual Status capture_begin(Stream*) {
    return Status(ErrorCode::UNSUPPORTED, "this backend cannot capture work");
  }
  virtual Result<std::unique_ptr<CapturedWork>> capture_end(Stream*) {
    return Status(ErrorCode::UNSUPPORTED, "this backend cannot capture work");
  }
  virtual Status captured_launch(CapturedWork*, Stream*) {
    return Status(ErrorCode::UNSUPPORTED, "this backend cannot capture work");
  }
};

// The CPU backend (always built). threads <= 0 means all hardware threads.
std::unique_ptr<Backend> cpu_backend_create(int threads = 0);

// The CUDA backend for device `index`; UNSUPPORTED when headroom was built without CUDA,
// NOT_FOUND when no GPU is present.
Result<std::unique_ptr<Backend>> cuda_backend_create(int index = 0);
// True when this build includes the CUDA backend.
bool cuda_backend_built();

}  // namespace hr
