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

namespace hr {

Json job_stats_json(const JobStatsSnapshot& s) {
  Json outcomes = Json::object();
  for (size_t i = 0; i < s.outcomes.size(); ++i)
    outcomes[job_outcome_name(JobOutcome(i))] = s.outcomes[i];
  return Json{{"outcomes", outcomes},
              {"oom_failures", s.oom_failures},
              {"unplanned", s.unplanned},
              {"steps", {{"counts", s.steps.counts}, {"sum", s.steps.sum}, {"count", s.steps.count}}}};
}

void job_stats_add(JobStatsSnapshot& sum, const Json& j) {
  if (!j.is_object()) return;
  auto u64 = [](const Json& v) { return v.is_number_unsigned() ? v.get<uint64_t>() : 0; };
  const Json& outcomes = j.value("outcomes", Json::object());
  for (size_t i = 0; i < sum.outcomes.size() && outcomes.is_object(); ++i)
    sum.outcomes[i] += u64(outcomes.value(job_outcome_name(JobOutcome(i)), Json()));
  sum.oom_failures += u64(j.value("oom_failures", Json()));
  sum.unplanned += u64(j.value("unplanned", Json()));
  const Json& steps = j.value("steps", Json::object());
  if (!steps.is_object()) return;
  const Json& counts = steps.value("counts", Json::array());
  for (size_t i = 0; i < sum.steps.counts.size() && counts.is_array() && i < counts.size(); ++i)
    sum.steps.counts[i] += u64(counts[i]);
  sum.steps.count += u64(steps.value("count", Json()));
  const Json& s = steps.value("sum", Json());
  if (s.is_number()) sum.steps.sum += s.get<double>();
}

}  // namespace hr
