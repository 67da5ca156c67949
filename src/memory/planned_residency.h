// The default residency policy: residency_plan on the device's clock, with the plans it made
// kept per (compiled graph, room) (Note [residency cache] in planned_residency.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/compiled_graph.h"
#include "graph/executor_policies.h"

namespace hr {

class PlannedResidency final : public ResidencyPolicy {
 public:
  // Plans with the clock and copy rate of `profile` (residency_options_for).
  explicit PlannedResidency(const DeviceProfile& profile);

  Result<ResidencyPlan> decide(const std::shared_ptr<const CompiledGraph>& compiled,
                               uint64_t room) override;
  uint64_t min_room(const CompiledGraph& compiled) const override;
  const ResidencyOptions& options() const override { return options_; }
  void set_options(const ResidencyOptions& options) override;
  const DeviceProfile& device_profile() const override { return profile_; }
  void set_device_profile(const DeviceProfile& profile) override;
  size_t plans_made() const override { return plans_made_; }
  double plan_ms() const override { return plan_ms_; }

 private:
  Result<ResidencyPlan> plan_make(const CompiledGraph& c, uint64_t room) const;

  DeviceProfile profile_;
  ResidencyOptions options_;
  struct Cached {
    std::weak_ptr<const CompiledGraph> compiled;
    uint64_t room = 0;
    ResidencyPlan plan;
  };
  std::vector<Cached> cache_;  // newest last
  size_t plans_made_ = 0;
  double plan_ms_ = 0;
};

}  // namespace hr
