// Backend: the aggregate a backend implements, one small interface per concern (as ggml's
// device -> stream -> buffer): BackendDevice (device.h: what the device is, raw device and
// page-locked memory), BackendStreams (stream.h: streams, events, async copies), BackendKernels
// (kernels.h: the ops) and BackendCapture (capture.h: recorded work). Code that needs one concern
// takes that interface; code that needs several takes Backend&. `cpu/` is the reference
// implementation, `cuda/` the GPU one. Adding a backend must not touch graph/, models/ or jobs/.
#pragma once

#include <memory>

#include "backend/capture.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/stream.h"
#include "core/status.h"

namespace hr {

class Backend : public BackendDevice,
                public BackendStreams,
                public BackendKernels,
                public BackendCapture {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
};

// The CPU backend (always built). threads <= 0 means all hardware threads.
std::unique_ptr<Backend> cpu_backend_create(int threads = 0);

// The CUDA backend for device `index`; UNSUPPORTED when headroom was built without CUDA,
// NOT_FOUND when no GPU is present.
Result<std::unique_ptr<Backend>> cuda_backend_create(int index = 0);
// True when this build includes the CUDA backend.
bool cuda_backend_built();

}  // namespace hr
