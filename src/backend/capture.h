// BackendCapture: recording the work enqueued on a stream for replay with one launch (CUDA
// graphs), and the recorded work (CapturedWork).
#pragma once

#include <memory>

#include "backend/stream.h"
#include "core/status.h"

namespace hr {

// Work recorded from a stream (a CUDA graph), replayable with one launch.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
};

// Recording of the work enqueued on `s` between capture_begin and capture_end, for replay with
// one launch. Backends without it return UNSUPPORTED; nothing recorded may allocate,
// synchronise or copy from pageable host memory.
class BackendCapture {
 public:
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

 protected:
  BackendCapture() = default;
  ~BackendCapture() = default;  // owned as a Backend, borrowed as BackendCapture
  BackendCapture(const BackendCapture&) = delete;
  BackendCapture& operator=(const BackendCapture&) = delete;
};

}  // namespace hr
