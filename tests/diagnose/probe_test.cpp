// The probe's fill, move and swap back on a device of known size: a fake device-memory source
// (host memory with a capacity) and a fake driver lens over it; the probe logic is the real one.
#include "diagnose/probe.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "fake_backend.h"
#include "memory/device_profile_cache.h"
#include "memory/residency_clock.h"
#include "svg_check.h"

namespace hr {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// Device memory is host memory up to `capacity`; `others_take_freed` models another process
// that grabs whatever the probe frees.
class CapacityBackend : public test::UnsupportedBackend {
 public:
  explicit CapacityBackend(uint64_t capacity) : capacity_(capacity) {}
  DeviceInfo info() const override { return DeviceInfo{"fake gpu", "cuda", 0, capacity_, free()}; }
  bool memory_is_host() const override { return false; }
  Result<void*> device_alloc(size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    if (used_ + taken_ + bytes > capacity_)
      return Status(ErrorCode::OUT_OF_MEMORY, "fake device is full");
    void* p = std::malloc(bytes);
    sizes_[p] = bytes;
    used_ += bytes;
    return p;
  }
  void device_free(void* p) override {
    std::lock_guard<std::mutex> l(mu_);
    used_ -= sizes_[p];
    if (others_take_freed) taken_ += sizes_[p];
    sizes_.erase(p);
    std::free(p);
  }
  Result<void*> host_alloc_pinned(size_t bytes) override { return std::malloc(bytes); }
  void host_free_pinned(void* p) override { std::free(p); }
  Status stream_sync(Stream*) override { return Status(); }
  Status copy_h2d(void* d, const void* s, size_t n, Stream*) override { return copy(d, s, n); }
  Status copy_d2h(void* d, const void* s, size_t n, Stream*) override { return copy(d, s, n); }

  uint64_t used() const {
    std::lock_guard<std::mutex> l(mu_);
    return used_;
  }
  uint64_t taken() const {
    std::lock_guard<std::mutex> l(mu_);
    return taken_;
  }
  bool others_take_freed = false;

 private:
  static Status copy(void* d, const void* s, size_t n) {
    std::memcpy(d, s, n);
    return Status();
  }
  uint64_t free() const { return capacity_ - used() - taken(); }
  uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t used_ = 0, taken_ = 0;
  std::map<void*, size_t> sizes_;
};

// The driver's view: a context of `context` bytes plus what the backend holds; other processes
// hold what they took.
class FakeLens : public DriverLens {
 public:
  FakeLens(const CapacityBackend& b, uint64_t context) : b_(b), context_(context) {}
  DriverSample sample() override {
    DriverSample s;
    s.this_process = context_ + b_.used();
    s.other_processes = b_.taken();
    s.used = s.this_process + s.other_processes;
    s.total = b_.info().memory_total + context_;
    s.per_process = true;
    s.kind = DriverSource::NVML;
    s.source = source_;
    return s;
  }
  const std::string& source() const override { return source_; }

 private:
  const CapacityBackend& b_;
  uint64_t context_;
  std::string source_ = "fake nvml";
};

ProbeOptions small_options() {
  ProbeOptions o;
  o.block_bytes = 4 * MiB;
  o.bandwidth_bytes = 1 * MiB;
  o.bandwidth_reps = 2;
  o.sample_ms = 1;
  return o;
}

TEST(Probe, FillsMovesHalfAndSwapsBack) {
  CapacityBackend b(64 * MiB);
  Result<ProbeReport> r = probe_device(b, std::make_unique<FakeLens>(b, 3 * MiB), small_options());
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_TRUE(r->gpu);
  EXPECT_EQ(r->context_bytes, 3 * MiB);
  EXPECT_EQ(r->blocks, 16u);
  EXPECT_FALSE(r->fill_stop.empty());
  EXPECT_EQ(r->filled_allocator, 64 * MiB);
  EXPECT_EQ(r->at_full.used, 67 * MiB);
  EXPECT_EQ(r->blocks_moved, 8u);
  EXPECT_TRUE(r->move_stop.empty()) << r->move_stop;
  EXPECT_EQ(r->freed_allocator, 32 * MiB);
  EXPECT_EQ(r->freed_driver, int64_t(32 * MiB));
  EXPECT_EQ(r->move.bytes, 32 * MiB);
  EXPECT_GT(r->move.seconds, 0);
  EXPECT_EQ(r->blocks_back, 8u);
  EXPECT_TRUE(r->back_stop.empty());
  EXPECT_EQ(r->driver_peak.used, 67 * MiB);
  EXPECT_GT(r->h2d_pinned.gbps(), 0);
  EXPECT_GT(r->d2h_pageable.gbps(), 0);
  EXPECT_EQ(b.used(), 0u);  // everything given back
  EXPECT_EQ(r->phases.size(), 4u);

  Json j = probe_json(*r);
  EXPECT_EQ(j["fill"]["blocks"], 16);
  EXPECT_EQ(j["move"]["freed_driver_level"], int64_t(32 * MiB));
  EXPECT_EQ(j["context_bytes"], 3 * MiB);
  const std::string text = probe_format(*r);
  EXPECT_NE(text.find("fill: 16 blocks of 4.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("freed: 32.0 MiB (allocator level), 32.0 MiB (driver level)"),
            std::string::npos)
      << text;
  test::SvgCheck c = test::svg_check(probe_plot(*r));
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_GE(c.count("polyline"), 3u);
}

TEST(Probe, PinnedBudgetCutsTheMoveShort) {
  CapacityBackend b(64 * MiB);
  ProbeOptions o = small_options();
  o.pinned_budget = 12 * MiB;
  Result<ProbeReport> r = probe_device(b, std::make_unique<FakeLens>(b, 0), o);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->blocks_moved, 3u);
  EXPECT_NE(r->move_stop.find("pinned budget"), std::string::npos) << r->move_stop;
  EXPECT_EQ(r->blocks_back, 3u);
}

TEST(Probe, AnotherProcessTakingTheRoomEndsTheSwapBackWithoutFailing) {
  CapacityBackend b(64 * MiB);
  b.others_take_freed = true;  // whatever the probe frees goes to another process at once
  ProbeOptions o = small_options();
  o.fraction = 0.25;
  o.bandwidth_bytes = 4 * MiB;  // its buffer's room is taken, so the fill gets 15 blocks
  Result<ProbeReport> r = probe_device(b, std::make_unique<FakeLens>(b, 0), o);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->blocks, 15u);
  EXPECT_EQ(r->blocks_moved, 4u);
  EXPECT_EQ(r->freed_driver, 0);  // freed by the probe, taken by the other process
  EXPECT_EQ(r->blocks_back, 0u);
  EXPECT_FALSE(r->back_stop.empty());
  EXPECT_EQ(r->others_at_peak, 4 * MiB);
}

TEST(Probe, RejectsBadOptions) {
  CapacityBackend b(8 * MiB);
  ProbeOptions o = small_options();
  o.fraction = 1.5;
  EXPECT_EQ(probe_device(b, std::make_unique<FakeLens>(b, 0), o).status().code(),
            ErrorCode::INVALID_ARGUMENT);
  o = small_options();
  o.block_bytes = 0;
  EXPECT_EQ(probe_device(b, std::make_unique<FakeLens>(b, 0), o).status().code(),
            ErrorCode::INVALID_ARGUMENT);
}

TEST(Probe, HostOnlyMeasuresMemcpy) {
  ProbeOptions o = small_options();
  o.bandwidth_reps = 3;
  ProbeReport r = probe_host(o);
  EXPECT_FALSE(r.gpu);
  EXPECT_EQ(r.host_memcpy_reps_gbps.size(), 3u);
  EXPECT_GT(r.host_memcpy.gbps(), 0);
  EXPECT_GT(r.host_ram_total, 0u);
  Json j = probe_json(r);
  EXPECT_EQ(j["gpu"], false);
  EXPECT_FALSE(j.contains("fill"));
  EXPECT_TRUE(test::svg_check(probe_plot(r)).ok);
}

// `headroom probe` measures the device profile and refreshes its cache (Note [device profile]).
TEST(Probe, ProfileIsMeasuredReportedAndWritten) {
  const std::string path = ::testing::TempDir() + "hr_probe_profile/device-profile-cpu.json";
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  ProbeReport r = probe_host(small_options());
  probe_profile(r, *cpu, path);
  EXPECT_TRUE(r.profile.measured);
  EXPECT_GT(r.profile.gemm_flops_per_s, 0);
  EXPECT_EQ(r.profile_path, path);
  Result<DeviceProfile> cached = device_profile_read(path);
  ASSERT_TRUE(cached.ok()) << cached.status().str();
  EXPECT_EQ(*cached, r.profile);
  Json j = probe_json(r);
  EXPECT_EQ(j["profile"]["cache"], path);
  EXPECT_EQ(j["profile"]["gemm_flops_per_s"].get<double>(), r.profile.gemm_flops_per_s);
  EXPECT_NE(probe_format(r).find("device profile"), std::string::npos);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Probe, ProfileWithoutTimingEventsFallsBackAndSaysWhy) {
  CapacityBackend b(64 * MiB);  // no timing events
  ProbeReport r;
  probe_profile(r, b, ::testing::TempDir() + "hr_probe_never/p.json");
  EXPECT_FALSE(r.profile.measured);
  EXPECT_EQ(r.profile, device_profile_default(false));
  EXPECT_FALSE(r.profile_error.empty());
  EXPECT_TRUE(r.profile_path.empty());
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "hr_probe_never"));
}

}  // namespace
}  // namespace hr
