// The default memory policies of an Executor.
#include "memory/executor_policies.h"

#include "memory/oom_recovery.h"
#include "memory/planned_residency.h"
#include "memory/residency_clock.h"

namespace hr {

ExecutorPolicies executor_policies_default(const Backend& backend) {
  ExecutorPolicies p;
  p.residency = std::make_unique<PlannedResidency>(device_profile_default(backend.memory_is_host()));
  p.recovery = std::make_unique<OomRecovery>();
  return p;
}

}  // namespace hr
