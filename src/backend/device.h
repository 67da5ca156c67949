// BackendDevice: what a backend's device is (DeviceInfo, the properties of Note [device
// properties]) and its raw memory (device buffers, page-locked host buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace hr {

struct DeviceInfo {
  std::string name;          // "cpu (16 threads)", "NVIDIA H200"
  std::string kind;          // "cpu" or "cuda"
  int index = 0;
  uint64_t memory_total = 0;  // bytes (driver level); host RAM for the CPU
  uint64_t memory_free = 0;
};

// The generator torch draws a device's random numbers from; a seed gives ComfyUI's noise only
// when headroom draws it from the same one (sampling/torch_rng.h computes both on the host).
enum class TorchGenerator : uint8_t {
  CPU_MT19937,  // torch's CPU generator
  CUDA_PHILOX,  // torch's CUDA generator (Philox 4x32-10)
};

// Note [device properties]
// Callers ask a backend what they need to know, never what kind of device it is:
// - memory_is_host(): device memory is host memory (the CPU backend). Host code may read and
//   write device pointers, so a weight's host copy serves as its device copy without an upload
//   (Note [adopted bytes] in the weight store); copies are memcpy, not transfers over a bus; the
//   device has no memory of its own beside the process's (no context for a driver lens to
//   measure, no device free memory for OOM recovery to divide); and its plans use the fixed
//   host profile, because streaming on such a device only stands in for a GPU (Note [device
//   profile cache]).
// - torch_generator(): the generator a sampler's noise must come from so that a seed gives the
//   noise ComfyUI draws on this device (nodes pick the noise device from it).
// - BackendKernels::compute_dtype_default(): the dtype `--dtype auto` computes in.
// - BackendKernels::prefers_stacked_weights(): whether graph passes stack projections' weights
//   into one GEMM (Note [stacked context projections] in graph/pass_stack.cpp).
// - BackendKernels::prefers_channels_last(dtype), BackendCapture::capture_supported(): as they say.
// A test double that stands in for a GPU answers all of them as a GPU does
// (AsyncSimBackend::set_discrete).
class BackendDevice {
 public:
  virtual DeviceInfo info() const = 0;
  virtual bool memory_is_host() const = 0;  // Note [device properties]
  virtual TorchGenerator torch_generator() const { return TorchGenerator::CPU_MT19937; }

  // Raw device memory. Callers go through Allocator (allocator.h), which enforces the budget
  // and keeps statistics; nothing else calls these.
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual void device_free(void* p) = 0;
  // Host memory usable for async copies (page-locked on CUDA).
  virtual Result<void*> host_alloc_pinned(size_t bytes) = 0;
  virtual void host_free_pinned(void* p) = 0;
  // Whether `p` lies in page-locked host memory (a capture may record copies only from such).
  virtual bool host_pinned(const void*) const { return true; }

 protected:
  BackendDevice() = default;
  ~BackendDevice() = default;  // owned as a Backend, borrowed as a BackendDevice
  BackendDevice(const BackendDevice&) = delete;
  BackendDevice& operator=(const BackendDevice&) = delete;
};

}  // namespace hr
