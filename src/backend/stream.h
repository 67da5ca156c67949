// BackendStreams: ordered queues of work (Stream), markers between them (Event, timing events)
// and the async copies ordered on them.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"

namespace hr {

// An ordered queue of work on a backend. Opaque; created by BackendStreams::stream_create.
class Stream {
 public:
  virtual ~Stream() = default;
};

// A marker recorded on a stream; another stream (or the host) can wait for it.
class Event {
 public:
  virtual ~Event() = default;
};

class BackendStreams {
 public:
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

 protected:
  BackendStreams() = default;
  ~BackendStreams() = default;  // owned as a Backend, borrowed as BackendStreams
  BackendStreams(const BackendStreams&) = delete;
  BackendStreams& operator=(const BackendStreams&) = delete;
};

}  // namespace hr
