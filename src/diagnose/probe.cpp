// The probe's measurements: host bandwidth, device bandwidths, fill, move and swap back.
#include "diagnose/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/allocator.h"
#include "core/bytes.h"
#include "memory/device_measure.h"
#include "memory/device_profile_cache.h"
#include "memory/eviction.h"
#include "memory/residency_clock.h"

namespace hr {

// Note [probe]
// The probe measures the card, not a budget: its Allocator is unlimited, and it allocates
// blocks until the device refuses one (a refusal is a result, never a crash). It reports both
// lenses and never subtracts one from the other: the allocator level (bytes its blocks hold)
// and the driver level (NVML or cudaMemGetInfo: the device's used bytes, per process where
// NVML can tell). The CUDA context is the driver-level bytes this process holds before its
// first allocation. Then it moves `fraction` of the blocks into page-locked host memory (copy,
// then free: what streaming weights out does), samples what the driver got back, and moves
// them back (allocate, copy). Page-locked memory is bounded by the pinned budget (half of RAM
// by default) because pinning all of a large card's bytes can starve the host; a move cut short
// says so. Bandwidths are measured first, on an empty card, with one buffer of each kind and a
// synchronisation after every copy, so each figure is a plain blocking copy's rate.

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Touches every page so that the first timed copy does not pay for page faults.
std::vector<uint8_t> host_buffer(uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  std::memset(v.data(), 1, v.size());
  return v;
}

void host_bandwidth(ProbeReport& r, const ProbeOptions& o) {
  std::vector<uint8_t> a = host_buffer(o.bandwidth_bytes), b = host_buffer(o.bandwidth_bytes);
  std::memcpy(b.data(), a.data(), a.size());  // warm-up
  for (int i = 0; i < std::max(1, o.bandwidth_reps); ++i) {
    const auto t0 = Clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), a.size());
    const double s = seconds_since(t0);
    r.host_memcpy.bytes += a.size();
    r.host_memcpy.seconds += s;
    r.host_memcpy_reps_gbps.push_back(s > 0 ? double(a.size()) / s / 1e9 : 0);
  }
}

void host_ram(ProbeReport& r) {
  DriverSample s = driver_lens_host()->sample();
  r.host_ram_total = s.total;
  r.host_ram_used = s.used;
}

// `reps` blocking copies of `bytes` between host memory `host` and device memory `dev`.
Result<Transfer> copies_time(Backend& b, void* dev, void* host, uint64_t bytes, bool to_device,
                             int reps) {
  auto once = [&]() -> Status {
    HR_TRY(to_device ? b.copy_h2d(dev, host, bytes, nullptr)
                     : b.copy_d2h(host, dev, bytes, nullptr));
    return b.stream_sync(nullptr);
  };
  HR_TRY(once());  // warm-up
  Transfer t;
  const auto t0 = Clock::now();
  for (int i = 0; i < std::max(1, reps); ++i) HR_TRY(once());
  t.seconds = seconds_since(t0);
  t.bytes = bytes * uint64_t(std::max(1, reps));
  return t;
}

struct PinnedBuffer {
  Backend* backend = nullptr;
  void* p = nullptr;
  PinnedBuffer(Backend* b, void* q) : backend(b), p(q) {}
  PinnedBuffer(PinnedBuffer&& o) noexcept : backend(o.backend), p(o.p) { o.p = nullptr; }
  PinnedBuffer(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p) backend->host_free_pinned(p);
  }
};

Status device_bandwidth(ProbeReport& r, Backend& b, Allocator& alloc, const ProbeOptions& o) {
  const uint64_t n = o.bandwidth_bytes;
  HR_ASSIGN_OR_RETURN(DeviceBuffer dev, alloc.allocate(n, Pool::OTHER, "probe bandwidth buffer"));
  std::vector<uint8_t> pageable = host_buffer(n);
  HR_ASSIGN_OR_RETURN(r.h2d_pageable,
                      copies_time(b, dev.data(), pageable.data(), n, true, o.bandwidth_reps));
  HR_ASSIGN_OR_RETURN(r.d2h_pageable,
                      copies_time(b, dev.data(), pageable.data(), n, false, o.bandwidth_reps));
  Result<void*> pinned = b.host_alloc_pinned(n);
  if (!pinned.ok()) return Status();  // no page-locked memory: the pinned figures stay 0
  PinnedBuffer hold(&b, *pinned);
  std::memset(hold.p, 1, n);
  HR_ASSIGN_OR_RETURN(r.h2d_pinned, copies_time(b, dev.data(), hold.p, n, true, o.bandwidth_reps));
  HR_ASSIGN_OR_RETURN(r.d2h_pinned, copies_time(b, dev.data(), hold.p, n, false, o.bandwidth_reps));
  return Status();
}

class DeviceProbe {
 public:
  DeviceProbe(Backend& b, std::unique_ptr<DriverLens> lens, const ProbeOptions& o, ProbeReport& r)
      : b_(b),
        o_(o),
        r_(r),
        alloc_(b, Allocator::kUnlimited, eviction_policy()),
        tel_(alloc_, std::move(lens), telemetry_options(o)) {}

  Status run() {
    const TelemetrySample first = tel_.latest();
    r_.driver_source = tel_.driver_source();
    r_.per_process = first.driver.per_process;
    r_.device_total = first.driver.total;
    r_.context_bytes = tel_.context_overhead();
    r_.others_at_start = first.driver.other_processes;
    HR_TRY(device_bandwidth(r_, b_, alloc_, o_));
    tel_.start();
    fill();
    HR_TRY(move_out());
    HR_TRY(move_back());
    phase("free");
    blocks_.clear();
    pinned_.clear();
    tel_.sample_now();
    tel_.stop();
    r_.driver_peak = tel_.peaks().driver;
    r_.others_at_peak = r_.driver_peak.other_processes;
    r_.timeline = tel_.snapshot();
    return Status();
  }

 private:
  static TelemetryOptions telemetry_options(const ProbeOptions& o) {
    TelemetryOptions t;
    t.period_ms = std::max(1, o.sample_ms);
    t.capacity = 100000;
    t.driver_reuse_ms = 0;
    return t;
  }
  void phase(const char* name) {
    tel_.sample_now();
    r_.phases.push_back({tel_.latest().time_ms, name});
  }

  void fill() {
    phase("fill");
    for (;;) {
      Result<DeviceBuffer> blk = alloc_.allocate(o_.block_bytes, Pool::OTHER, "probe block");
      if (!blk.ok()) {
        r_.fill_stop = blk.status().message();
        break;
      }
      blocks_.push_back(std::move(blk).value());
    }
    r_.blocks = blocks_.size();
    r_.filled_allocator = alloc_.total().current;
    tel_.sample_now();
    r_.at_full = tel_.latest().driver;
  }

  // Page-locked buffers for the blocks to move, within the pinned budget; allocated before the
  // timed move (pinning is slow and not part of what moving weights costs).
  size_t pinned_reserve(size_t want) {
    uint64_t held = 0;
    while (pinned_.size() < want) {
      if (held + o_.block_bytes > o_.pinned_budget) {
        r_.move_stop = fmt::format("page-locked host memory is limited to {} (the pinned budget)",
                                   bytes_format(o_.pinned_budget));
        break;
      }
      Result<void*> p = b_.host_alloc_pinned(o_.block_bytes);
      if (!p.ok()) {
        r_.move_stop = p.status().message();
        break;
      }
      pinned_.emplace_back(&b_, *p);
      held += o_.block_bytes;
    }
    return pinned_.size();
  }

  Status move_out() {
    const size_t want = size_t(std::llround(o_.fraction * double(blocks_.size())));
    const size_t n = pinned_reserve(want);
    phase("move");
    const uint64_t before = alloc_.total().current;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      DeviceBuffer& blk = blocks_[blocks_.size() - 1 - i];
      HR_TRY(b_.copy_d2h(pinned_[i].p, blk.data(), blk.size(), nullptr));
      HR_TRY(b_.stream_sync(nullptr));
      blk.reset();
    }
    r_.move = {uint64_t(n) * o_.block_bytes, seconds_since(t0)};
    r_.blocks_moved = n;
    r_.freed_allocator = before - alloc_.total().current;
    tel_.sample_now();
    r_.freed_driver = int64_t(r_.at_full.used) - int64_t(tel_.latest().driver.used);
    return Status();
  }

  Status move_back() {
    phase("swap back");
    const auto t0 = Clock::now();
    size_t back = 0;
    for (; back < r_.blocks_moved; ++back) {
      DeviceBuffer& blk = blocks_[blocks_.size() - 1 - back];
      Result<DeviceBuffer> again = alloc_.allocate(o_.block_bytes, Pool::OTHER, "probe block");
      if (!again.ok()) {
        r_.back_stop = again.status().message();
        break;
      }
      blk = std::move(again).value();
      HR_TRY(b_.copy_h2d(blk.data(), pinned_[back].p, blk.size(), nullptr));
      HR_TRY(b_.stream_sync(nullptr));
    }
    r_.swap_back = {uint64_t(back) * o_.block_bytes, seconds_since(t0)};
    r_.blocks_back = back;
    return Status();
  }

  Backend& b_;
  const ProbeOptions& o_;
  ProbeReport& r_;
  Allocator alloc_;  // unlimited: the probe measures the card (Note [probe])
  Telemetry tel_;
  std::vector<DeviceBuffer> blocks_;
  std::vector<PinnedBuffer> pinned_;
};

Status options_check(const ProbeOptions& o) {
  if (o.block_bytes == 0) return Status(ErrorCode::INVALID_ARGUMENT, "--block-mib must be > 0");
  if (!(o.fraction >= 0 && o.fraction <= 1))
    return Status(ErrorCode::INVALID_ARGUMENT, "--fraction must be in [0, 1]");
  if (o.bandwidth_bytes == 0)
    return Status(ErrorCode::INVALID_ARGUMENT, "the bandwidth buffer must be > 0 bytes");
  return Status();
}

}  // namespace

ProbeReport probe_host(const ProbeOptions& options) {
  ProbeReport r;
  host_ram(r);
  host_bandwidth(r, options);
  return r;
}

void probe_profile(ProbeReport& r, Backend& backend, const std::string& cache_path) {
  Result<DeviceProfile> p = device_profile_measure(backend);
  if (!p.ok()) {
    r.profile = device_profile_default(backend.memory_is_host());
    r.profile_error = p.status().message();
    return;
  }
  r.profile = std::move(p).value();
  if (cache_path.empty()) return;
  if (Status w = device_profile_write(cache_path, r.profile); !w.ok())
    r.profile_error = w.message();
  else
    r.profile_path = cache_path;
}

Result<ProbeReport> probe_device(Backend& backend, std::unique_ptr<DriverLens> lens,
                                 const ProbeOptions& options) {
  HR_TRY(options_check(options));
  ProbeReport r = probe_host(options);
  r.device = backend.info().name;
  r.gpu = true;
  r.block_bytes = options.block_bytes;
  r.bandwidth_bytes = options.bandwidth_bytes;
  DeviceProbe p(backend, std::move(lens), options, r);
  HR_TRY(p.run());
  return r;
}

}  // namespace hr
