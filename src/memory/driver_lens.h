// The driver-level lens: device memory as the driver (or the OS) sees it, per process where it
// can tell. NVML loaded at run time on CUDA (falling back to cudaMemGetInfo, saying why), /proc
// on the CPU. The allocator-level lens is Allocator's own statistics (backend/allocator.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/device.h"

namespace hr {

enum class DriverSource : uint8_t {
  NVML = 0,           // libnvidia-ml.so.1: device used/total and per-process usage
  CUDA_MEM_GET_INFO,  // Backend::info() (cudaMemGetInfo): device used/total only
  HOST_PROC,          // /proc/meminfo and /proc/self/status: host RAM, this process's RSS
  NONE,               // nothing measured (a sample taken before any lens existed)
};

struct DriverSample {
  uint64_t used = 0;   // bytes in use on the device (all processes); host: MemTotal-MemAvailable
  uint64_t total = 0;  // device memory; host: MemTotal
  uint64_t this_process = 0;     // NVML: this pid's usedGpuMemory; host: VmRSS
  uint64_t other_processes = 0;  // NVML: the other listed pids; host: used - this_process
  // Whether this_process / other_processes were measured. False for cudaMemGetInfo, and for
  // NVML when this pid is not in its process list (Note [NVML process ids]).
  bool per_process = false;
  DriverSource kind = DriverSource::NONE;
  // "nvml", "cudaMemGetInfo (NVML not available: <why>)" or "host (/proc)".
  std::string source;
};

// One device's driver-level view. sample() may be called from any thread; NVML and /proc reads
// take well under a millisecond, cudaMemGetInfo a few microseconds.
class DriverLens {
 public:
  virtual ~DriverLens() = default;
  DriverLens() = default;
  DriverLens(const DriverLens&) = delete;
  DriverLens& operator=(const DriverLens&) = delete;

  // The best lens for `device`, which must outlive it: NVML for a CUDA device when
  // `nvml_library` loads and names the same device, else cudaMemGetInfo with the reason in
  // source; /proc for the CPU. Never fails: a missing library is a fallback, not an error.
  static std::unique_ptr<DriverLens> open(const BackendDevice& device,
                                          const char* nvml_library = "libnvidia-ml.so.1");

  virtual DriverSample sample() = 0;
  // What sample().source says, without sampling.
  virtual const std::string& source() const = 0;
};

// The host lens on its own (what open() gives for the CPU backend); public for the tests.
std::unique_ptr<DriverLens> driver_lens_host();

}  // namespace hr
