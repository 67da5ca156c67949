// `headroom probe`: what a device really offers (Note [probe] in probe.cpp). It fills the device
// with blocks until allocation fails, moves a fraction of them to page-locked host memory and
// back, and measures copy bandwidths; without a GPU it measures host memory bandwidth instead.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/device_profile.h"
#include "memory/driver_lens.h"
#include "memory/telemetry.h"

namespace hr {

using Json = nlohmann::json;

struct ProbeOptions {
  uint64_t block_bytes = 512ull << 20;      // --block-mib
  double fraction = 0.5;                    // of the blocks moved to host memory and back
  uint64_t bandwidth_bytes = 256ull << 20;  // buffer of each bandwidth measurement
  int bandwidth_reps = 5;
  // Page-locked host bytes the move may take (Note [probe]); the rest of the fraction stays.
  uint64_t pinned_budget = UINT64_MAX;
  int sample_ms = 20;  // driver-level sampling period while it runs
};

// Bytes over seconds; gbps() in GB/s (10^9 bytes per second), 0 when nothing was timed.
struct Transfer {
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }
};

struct ProbePhase {
  double time_ms = 0;  // on the telemetry's clock
  std::string name;    // "fill", "move", "swap back", "free"
};

struct ProbeReport {
  std::string device;  // backend name
  bool gpu = false;
  std::string no_gpu_reason;  // when !gpu

  // Host (always): RAM (driver level, /proc) and memcpy bandwidth, one entry per repetition.
  uint64_t host_ram_total = 0, host_ram_used = 0;
  Transfer host_memcpy;
  std::vector<double> host_memcpy_reps_gbps;

  // Device (gpu only).
  std::string driver_source;
  bool per_process = false;      // driver level measured per process
  uint64_t device_total = 0;     // driver level
  uint64_t context_bytes = 0;    // driver level: this process before any allocation
  uint64_t others_at_start = 0;  // driver level: other processes at start
  uint64_t others_at_peak = 0;   // driver level: other processes at the fullest sample
  uint64_t bandwidth_bytes = 0;  // the buffer each copy below moved, per repetition
  Transfer h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable;
  uint64_t block_bytes = 0;
  uint64_t blocks = 0;            // allocated before the first failure
  std::string fill_stop;          // the failure that ended the fill
  uint64_t filled_allocator = 0;  // allocator level: bytes held when full
  DriverSample at_full;           // driver level when full
  uint64_t blocks_moved = 0;      // to page-locked host memory
  std::string move_stop;          // why fewer than the fraction moved (pinned memory refused)
  uint64_t freed_allocator = 0;   // allocator level: bytes given back by the move
  int64_t freed_driver = 0;       // driver level: used when full minus used after the move
  Transfer move;                  // copies to the host and frees
  uint64_t blocks_back = 0;
  std::string back_stop;     // why fewer blocks came back (someone took the room)
  Transfer swap_back;        // allocations and copies back to the device
  DriverSample driver_peak;  // driver level: the sample with the most `used`
  std::vector<TelemetrySample> timeline;
  std::vector<ProbePhase> phases;

  // The rates the residency planner plans with (Note [device profile] in
  // memory/residency_clock.cpp), measured by probe_profile; profile.measured is false when they
  // were not (profile_error says why). profile_path: the cache file it was written to, "" when
  // none (memory_is_host(), Note [device profile cache] in memory/device_profile_cache.cpp).
  DeviceProfile profile;
  std::string profile_error;
  std::string profile_path;
};

// Host memory bandwidth and RAM: what probe reports on a machine without a GPU.
ProbeReport probe_host(const ProbeOptions& options);

// The device probe on `backend` (not memory_is_host()), observed through `lens`; host figures are
// filled too. Never fails for lack of memory: a refused allocation ends a phase and says why.
// INVALID_ARGUMENT for a zero block or a fraction outside [0, 1]; other backend errors (a copy
// that fails) are returned.
Result<ProbeReport> probe_device(Backend& backend, std::unique_ptr<DriverLens> lens,
                                 const ProbeOptions& options);

// Measures the device profile of `backend` into r.profile and, where `cache_path` is not empty,
// writes it there (what later processes start with: `headroom probe` refreshes the cache). Run
// after probe_device, on the emptied card. A failed measurement or write is reported in r, not
// returned.
void probe_profile(ProbeReport& r, Backend& backend, const std::string& cache_path);

// The report as JSON (every byte count also in the lens it was measured in), as text, and as a
// chart: memory over time per lens and the bandwidths.
Json probe_json(const ProbeReport& r);
std::string probe_format(const ProbeReport& r);
std::string probe_plot(const ProbeReport& r);

}  // namespace hr
