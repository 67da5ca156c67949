// A device's rates as data, measured once per device (memory/device_measure.h, cached on disk by
// memory/device_profile_cache.h). The residency clock built from them and the fallback profiles
// are memory policy (memory/residency_clock.h, Note [device profile] there).
#pragma once

#include <string>

namespace hr {

// What one device does, as probes measure it: a large GEMM, a large device copy, a tiny kernel
// and a host-to-device copy from page-locked memory.
struct DeviceProfile {
  std::string device;                // DeviceInfo::name it was measured on ("NVIDIA H200")
  double gemm_flops_per_s = 0;       // f16 where the backend has it, else f32
  double attention_flops_per_s = 0;  // a fixed share of the GEMM rate (kAttentionShare)
  double memory_bytes_per_s = 0;     // bytes read plus bytes written
  double node_s = 0;                 // seconds one small op costs beyond its work
  double copy_bytes_per_s = 0;       // host to device, page-locked
  bool measured = false;             // false: a fallback profile (device_profile_default)

  bool operator==(const DeviceProfile&) const = default;
  // Every rate positive and finite, node_s finite and not negative.
  bool valid() const;
};

// "NVIDIA H200: GEMM 700.0 TFLOP/s, attention 210.0 TFLOP/s, memory 3000.0 GB/s, 1.50 us per
// op, host to device 55.0 GB/s".
std::string device_profile_describe(const DeviceProfile& profile);

}  // namespace hr
