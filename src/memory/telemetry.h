// The telemetry ring buffer: both memory lenses sampled on a thread (~100 ms) and at node
// boundaries, with the planned and measured peak of the running node, for the server's
// vram_update, the dashboard and the two summary lines of `headroom run`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/allocator.h"
#include "memory/driver_lens.h"

namespace hr {

// Allocator-level bytes per segment (the allocator's pools).
struct AllocatorSegments {
  uint64_t context = 0;  // context and overhead the allocator holds (library workspaces)
  uint64_t weights = 0;
  uint64_t activations = 0;
  uint64_t staging = 0;
  uint64_t other = 0;
  uint64_t total = 0;
  uint64_t budget = Allocator::kUnlimited;
};

enum class SampleKind : uint8_t { PERIODIC = 0, NODE_BEGIN, NODE_END };

struct TelemetrySample {
  uint64_t seq = 0;    // 1, 2, 3, ... in the order samples were taken
  double time_ms = 0;  // steady clock, since the Telemetry was made
  SampleKind kind = SampleKind::PERIODIC;
  // Allocator level: bytes held now, except in NODE_END samples, where these are the bytes at
  // the node's measured peak (Note [node peak]).
  AllocatorSegments allocator;
  DriverSample driver;              // driver level, now
  std::string node;                 // the running node ("3 KSampler"); empty between nodes
  uint64_t node_planned_peak = 0;   // as given to node_begin (allocator level, all pools)
  uint64_t node_measured_peak = 0;  // allocator-level total peak since node_begin, so far
};

// One finished node, as node_end() returns it.
struct NodePeak {
  std::string node;
  uint64_t planned = 0;
  uint64_t measured = 0;      // allocator-level total peak between node_begin and node_end
  AllocatorSegments at_peak;  // the segments at that peak
  double begin_ms = 0, end_ms = 0;
};

// Peaks over the whole run (not only what the ring still holds), per lens.
struct TelemetryPeaks {
  AllocatorSegments allocator;  // at the allocator-level peak (allocator.total is the peak)
  DriverSample driver;          // the driver sample with the largest `used`
  uint64_t samples = 0;
};

struct TelemetryOptions {
  size_t capacity = 3000;  // samples kept; 3000 = 5 min at 100 ms
  int period_ms = 100;     // sampler thread period
  // Node boundaries reuse the latest driver sample when it is younger than this, so that many
  // short nodes do not each pay an NVML query.
  double driver_reuse_ms = 5;
};

// Note [node peak]: the measured peak of a node is exact at the allocator level: it comes from
// Allocator::peak_window_take() (Note [peak window] in backend/allocator.h), taken at
// node_begin, at every sample inside the node and at node_end, and the windows partition time.
// The Telemetry therefore owns the allocator's peak window: make one Telemetry per Allocator.
// The allocator's reset_peak() and PoolStats::peak are untouched.
//
// Thread-safety: every method may be called from any thread. Nodes do not nest; node_begin()
// while a node runs ends that node first.
class Telemetry {
 public:
  Telemetry(Allocator& allocator, std::unique_ptr<DriverLens> lens, TelemetryOptions options = {});
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;
  ~Telemetry();  // stops the sampler

  // The sampler thread: one PERIODIC sample every period_ms. start() on a running sampler and
  // stop() on a stopped one do nothing; stop() returns after the thread has exited.
  void start();
  void stop();
  bool running() const;

  // Takes one PERIODIC sample now (also what the sampler thread does).
  void sample_now();
  void node_begin(const std::string& node, uint64_t planned_peak);
  NodePeak node_end();

  // Samples with time_ms > since_ms, oldest first (since_ms < 0: all the ring holds). Readers
  // poll with the time_ms of the last sample they saw; seq tells samples of equal time apart.
  std::vector<TelemetrySample> snapshot(double since_ms = -1) const;
  TelemetrySample latest() const;  // seq 0 when nothing was sampled yet
  TelemetryPeaks peaks() const;
  // Driver-level this_process minus the allocator's total at construction: the CUDA context and
  // whatever else the process held before the allocator (0 where per-process is not measured).
  uint64_t context_overhead() const;
  const std::string& driver_source() const { return lens_->source(); }

  // Exactly two lines for `headroom run`, one per lens: the peak and the segments at the peak.
  std::vector<std::string> summary_lines() const;

 private:
  struct Node {
    std::string name;
    uint64_t planned = 0;
    uint64_t measured = 0;
    AllocatorSegments at_peak;
    double begin_ms = 0;
  };
  double now_ms() const;
  AllocatorSegments segments_now() const;
  AllocatorSegments segments_of(const PeakWindow& w) const;
  // Takes the allocator's peak window and folds it into the run and node peaks; mu_ held.
  void window_fold();
  DriverSample driver_sample(bool may_reuse);                                         // mu_ held
  void push(TelemetrySample s);                                                       // mu_ held
  NodePeak node_end_locked();                                                         // mu_ held
  TelemetrySample sample_make(SampleKind kind, double t, DriverSample driver) const;  // mu_ held
  void sampler_loop();

  Allocator& allocator_;
  std::unique_ptr<DriverLens> lens_;
  TelemetryOptions options_;
  const std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::vector<TelemetrySample> ring_;
  size_t ring_next_ = 0;  // where the next sample goes once the ring is full
  uint64_t seq_ = 0;
  bool node_running_ = false;
  Node node_;
  TelemetryPeaks peaks_;
  DriverSample last_driver_;
  double last_driver_ms_ = -1e300;
  uint64_t context_overhead_ = 0;

  mutable std::mutex thread_mu_;  // start/stop
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace hr
