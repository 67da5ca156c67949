// Counters the worker keeps for /metrics: jobs by outcome and a histogram of sampler step
// latencies (Prometheus buckets, seconds).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "jobs/job.h"

namespace hr {

struct StepHistogram {
  static constexpr std::array<double, 11> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,    2.5,   5,    10};
  std::array<uint64_t, kBounds.size() + 1> counts{};  // last: above every bound (+Inf)
  double sum = 0;
  uint64_t count = 0;
  void add(double seconds);
};

struct JobStatsSnapshot {
  std::array<uint64_t, size_t(JobOutcome::COUNT_)> outcomes{};
  uint64_t oom_failures = 0;  // jobs that failed with OUT_OF_MEMORY after recovery
  uint64_t unplanned = 0;     // jobs admitted without a plan (Note [admission without a plan])
  StepHistogram steps;
};

// The snapshot as JSON (a worker's heartbeat record), and the sum of such records (a front's
// /metrics over every worker); fields missing from `j` add nothing.
Json job_stats_json(const JobStatsSnapshot& s);
void job_stats_add(JobStatsSnapshot& sum, const Json& j);

class JobStats {
 public:
  void outcome_add(JobOutcome o, bool oom);
  void unplanned_add();
  void step_add(double seconds);
  JobStatsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  JobStatsSnapshot s_;
};

}  // namespace hr
