// JobStats: mutex-guarded counters.
#include "jobs/job_stats.h"

namespace hr {

void StepHistogram::add(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts[i];
  sum += seconds;
  ++count;
}

void JobStats::outcome_add(JobOutcome o, bool oom) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.outcomes[size_t(o)];
  s_.oom_failures += oom;
}

void JobStats::unplanned_add() {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.unplanned;
}

void JobStats::step_add(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.steps.add(seconds);
}

JobStatsSnapshot JobStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

}  // namespace hr
