// Tests for the telemetry ring: wrapping, node boundaries with real allocations on the CPU
// backend (planned and measured peaks), the sampler thread, run peaks per lens and the two
// summary lines. The driver-level source is faked where exact figures are needed.
#include "memory/telemetry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "memory/eviction.h"

namespace hr {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A device-memory source whose figures the test sets.
class FakeLens final : public DriverLens {
 public:
  explicit FakeLens(DriverSample* value) : value_(value) {}
  DriverSample sample() override { return *value_; }
  const std::string& source() const override { return value_->source; }

 private:
  DriverSample* value_;
};

DriverSample driver_fake(uint64_t used, uint64_t mine, uint64_t others) {
  DriverSample d;
  d.kind = DriverSource::NVML;
  d.source = "nvml (fake)";
  d.total = 8 * kGiB;
  d.used = used;
  d.this_process = mine;
  d.other_processes = others;
  d.per_process = true;
  return d;
}

DeviceBuffer alloc_ok(Allocator& a, uint64_t bytes, Pool pool) {
  Result<DeviceBuffer> b = a.allocate(bytes, pool, "test");
  EXPECT_TRUE(b.ok()) << b.status().str();
  return b.ok() ? std::move(b).value() : DeviceBuffer();
}

TEST(Telemetry, RingWrapsAndKeepsTheNewest) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  DriverSample d = driver_fake(kGiB, 0, 0);
  TelemetryOptions o;
  o.capacity = 4;
  Telemetry t(alloc, std::make_unique<FakeLens>(&d), o);  // sample 1, at construction
  for (int i = 0; i < 9; ++i) t.sample_now();             // samples 2..10

  std::vector<TelemetrySample> all = t.snapshot();
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].seq, 7 + i);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i].time_ms, all[i - 1].time_ms);
  EXPECT_EQ(t.latest().seq, 10u);
  EXPECT_EQ(t.peaks().samples, 10u);

  std::vector<TelemetrySample> newer = t.snapshot(all[1].time_ms);
  ASSERT_FALSE(newer.empty());
  EXPECT_EQ(newer.back().seq, 10u);
  for (const TelemetrySample& s : newer) EXPECT_GT(s.time_ms, all[1].time_ms);
}

TEST(Telemetry, NodeBoundariesRecordPlannedAndMeasuredPeaks) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, 64 * kMiB, eviction_policy());
  DriverSample d = driver_fake(kGiB, 0, 0);
  Telemetry t(alloc, std::make_unique<FakeLens>(&d));

  DeviceBuffer weights = alloc_ok(alloc, 4 * kMiB, Pool::WEIGHTS);
  { DeviceBuffer big = alloc_ok(alloc, 32 * kMiB, Pool::OTHER); }  // a higher peak before

  t.node_begin("3 KSampler", 20 * kMiB);
  NodePeak node;
  {
    DeviceBuffer act = alloc_ok(alloc, 8 * kMiB, Pool::ACTIVATIONS);
    DeviceBuffer stage = alloc_ok(alloc, 4 * kMiB, Pool::STAGING);
    t.sample_now();      // a periodic sample inside the node
    alloc.reset_peak();  // another user of reset_peak must not disturb the node's peak
  }
  DeviceBuffer small = alloc_ok(alloc, 2 * kMiB, Pool::ACTIVATIONS);
  node = t.node_end();

  EXPECT_EQ(node.node, "3 KSampler");
  EXPECT_EQ(node.planned, 20 * kMiB);
  EXPECT_EQ(node.measured, 16 * kMiB);  // 4 weights + 8 activations + 4 staging
  EXPECT_EQ(node.at_peak.weights, 4 * kMiB);
  EXPECT_EQ(node.at_peak.activations, 8 * kMiB);
  EXPECT_EQ(node.at_peak.staging, 4 * kMiB);
  EXPECT_EQ(node.at_peak.other, 0u);
  EXPECT_EQ(node.at_peak.budget, 64 * kMiB);
  EXPECT_GE(node.end_ms, node.begin_ms);

  std::vector<TelemetrySample> s = t.snapshot();
  ASSERT_EQ(s.size(), 4u);  // construction, begin, periodic, end
  EXPECT_EQ(s[0].node, "");
  EXPECT_EQ(s[1].kind, SampleKind::NODE_BEGIN);
  EXPECT_EQ(s[1].node, "3 KSampler");
  EXPECT_EQ(s[1].node_planned_peak, 20 * kMiB);
  EXPECT_EQ(s[1].node_measured_peak, 4 * kMiB);  // what was held when it began
  EXPECT_EQ(s[2].kind, SampleKind::PERIODIC);
  EXPECT_EQ(s[2].node, "3 KSampler");
  EXPECT_EQ(s[2].node_measured_peak, 16 * kMiB);
  EXPECT_EQ(s[2].allocator.total, 16 * kMiB);
  EXPECT_EQ(s[3].kind, SampleKind::NODE_END);
  EXPECT_EQ(s[3].node_measured_peak, 16 * kMiB);
  EXPECT_EQ(s[3].allocator.activations, 8 * kMiB);  // at the node's peak, not at its end

  // The run's allocator-level peak is the 32 MiB block before the node, with its segments.
  TelemetryPeaks p = t.peaks();
  EXPECT_EQ(p.allocator.total, 36 * kMiB);
  EXPECT_EQ(p.allocator.weights, 4 * kMiB);
  EXPECT_EQ(p.allocator.other, 32 * kMiB);

  // A node that allocates nothing measures what was held throughout.
  small.reset();
  t.node_begin("8 VAEDecode", 6 * kMiB);
  NodePeak quiet = t.node_end();
  EXPECT_EQ(quiet.measured, 4 * kMiB);
  EXPECT_EQ(t.latest().kind, SampleKind::NODE_END);
  EXPECT_EQ(t.node_end().node, "");  // no node running: nothing recorded
  EXPECT_EQ(t.latest().node, "8 VAEDecode");
}

TEST(Telemetry, NodeBeginWhileANodeRunsEndsIt) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  DriverSample d = driver_fake(kGiB, 0, 0);
  Telemetry t(alloc, std::make_unique<FakeLens>(&d));
  t.node_begin("a", 1);
  { DeviceBuffer x = alloc_ok(alloc, 1 * kMiB, Pool::ACTIVATIONS); }
  t.node_begin("b", 2);
  std::vector<TelemetrySample> s = t.snapshot();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[2].kind, SampleKind::NODE_END);
  EXPECT_EQ(s[2].node, "a");
  EXPECT_EQ(s[2].node_measured_peak, 1 * kMiB);
  EXPECT_EQ(s[3].node, "b");
  EXPECT_EQ(t.node_end().measured, 0u);
}

TEST(Telemetry, SamplerThreadProducesSamplesAndStopsCleanly) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  DriverSample d = driver_fake(kGiB, 0, 0);
  TelemetryOptions o;
  o.period_ms = 5;
  auto t = std::make_unique<Telemetry>(alloc, std::make_unique<FakeLens>(&d), o);
  t->start();
  t->start();  // a second start does nothing
  EXPECT_TRUE(t->running());
  auto periodic = [&] {
    size_t n = 0;
    for (const TelemetrySample& s : t->snapshot()) n += s.kind == SampleKind::PERIODIC;
    return n;
  };
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (periodic() < 4 && std::chrono::steady_clock::now() < until) {
    t->node_begin("reader and writer race", 0);  // boundaries from another thread meanwhile
    t->node_end();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  t->stop();
  t->stop();
  EXPECT_FALSE(t->running());
  EXPECT_GE(periodic(), 4u);  // construction + at least three from the thread
  uint64_t last = t->latest().seq;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(t->latest().seq, last);  // stopped means stopped

  t->start();  // restartable, and the destructor stops a running sampler
  EXPECT_TRUE(t->running());
  t.reset();
}

TEST(Telemetry, DriverPeakAndSummaryLinesNameBothLenses) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, 64 * kMiB, eviction_policy());
  DriverSample d = driver_fake(1 * kGiB, 512 * kMiB, 512 * kMiB);
  Telemetry t(alloc, std::make_unique<FakeLens>(&d));
  EXPECT_EQ(t.context_overhead(), 512 * kMiB);  // this process at start, allocator empty
  EXPECT_EQ(t.driver_source(), "nvml (fake)");

  DeviceBuffer w = alloc_ok(alloc, 8 * kMiB, Pool::WEIGHTS);
  {
    DeviceBuffer a = alloc_ok(alloc, 4 * kMiB, Pool::ACTIVATIONS);
    d = driver_fake(3 * kGiB, 2 * kGiB, 1 * kGiB);
    t.sample_now();
  }
  d = driver_fake(2 * kGiB, 1 * kGiB, 1 * kGiB);
  t.sample_now();

  TelemetryPeaks p = t.peaks();
  EXPECT_EQ(p.driver.used, 3 * kGiB);
  EXPECT_EQ(p.driver.this_process, 2 * kGiB);
  EXPECT_EQ(p.allocator.total, 12 * kMiB);

  std::vector<std::string> lines = t.summary_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "allocator level: peak 12.0 MiB of budget 64.0 MiB (context 0 B, weights 8.0 MiB, "
            "activations 4.0 MiB, staging 0 B)");
  EXPECT_EQ(lines[1],
            "driver level (nvml (fake)): peak 3.00 GiB used of 8.00 GiB (this process 2.00 GiB, "
            "of which 512.0 MiB context and overhead measured at start; other processes 1.00 GiB)");
}

TEST(Telemetry, SummaryOnTheCpuUsesTheHostLens) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  Telemetry t(alloc, DriverLens::open(*cpu));
  { DeviceBuffer b = alloc_ok(alloc, 1 * kMiB, Pool::ACTIVATIONS); }
  t.sample_now();
  std::vector<std::string> lines = t.summary_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("allocator level: peak 1.0 MiB, no budget (", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("driver level (host (/proc)): peak ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("this process "), std::string::npos) << lines[1];
  std::printf("%s\n%s\n", lines[0].c_str(), lines[1].c_str());
}

TEST(Telemetry, PerProcessNotMeasuredIsSaid) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  DriverSample d;
  d.kind = DriverSource::CUDA_MEM_GET_INFO;
  d.source = "cudaMemGetInfo (NVML not available: fake)";
  d.total = 8 * kGiB;
  d.used = 1 * kGiB;
  Telemetry t(alloc, std::make_unique<FakeLens>(&d));
  EXPECT_EQ(t.context_overhead(), 0u);
  EXPECT_EQ(t.summary_lines()[1],
            "driver level (cudaMemGetInfo (NVML not available: fake)): peak 1.00 GiB used of "
            "8.00 GiB (per-process usage not measured)");
}

}  // namespace
}  // namespace hr
