// The default residency policy: the residency planner with its cache of plans.
#include "memory/planned_residency.h"

#include <chrono>

#include "memory/residency_clock.h"
#include "memory/residency_planner.h"

namespace hr {

PlannedResidency::PlannedResidency(const DeviceProfile& profile)
    : profile_(profile), options_(residency_options_for(profile)) {}

void PlannedResidency::set_options(const ResidencyOptions& options) {
  options_ = options;
  cache_.clear();
}

void PlannedResidency::set_device_profile(const DeviceProfile& profile) {
  const ResidencyOptions rates = residency_options_for(profile);
  profile_ = profile;
  options_.clock = rates.clock;
  options_.copy_bytes_per_s = rates.copy_bytes_per_s;
  cache_.clear();
}

uint64_t PlannedResidency::min_room(const CompiledGraph& c) const {
  return residency_min_room(c.weights, options_);
}

// Note [residency cache]
// residency_plan is a function of the graph's weight uses (fixed per compiled graph), the room
// and the options, and planning on the clock (Note [spreading copies]) costs ~20-30 ms of CPU
// for SDXL's 1680 weights (by reuse ~0.5 ms): made on every run, it was host time in every
// step, hidden from timed runs (they measure GPU events) but not from a sampler's wall clock.
// Plans are therefore kept per (compiled graph, room), the last few; new options clear them.
Result<ResidencyPlan> PlannedResidency::decide(const std::shared_ptr<const CompiledGraph>& cp,
                                               uint64_t room) {
  for (const Cached& e : cache_)
    if (e.room == room && e.compiled.lock() == cp) return e.plan;
  const auto t0 = std::chrono::steady_clock::now();
  Result<ResidencyPlan> made = plan_make(*cp, room);
  if (!made.ok()) return made;
  plan_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++plans_made_;
  constexpr size_t kKept = 8;
  if (cache_.size() >= kKept) cache_.erase(cache_.begin());
  cache_.push_back(Cached{cp, room, *made});
  return made;
}

Result<ResidencyPlan> PlannedResidency::plan_make(const CompiledGraph& c, uint64_t room) const {
  if (room >= c.weight_bytes) {
    ResidencyPlan all;
    all.offset.assign(c.weights.size(), -1);
    all.copy_after.assign(c.weights.size(), -1);
    all.resident_bytes = c.weight_bytes;
    all.room = room;
    return all;
  }
  return residency_plan(c.weights, room, options_);
}

}  // namespace hr
