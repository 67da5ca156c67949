// The default recovery policy: what a run does when an allocation failed although its plan
// fitted the budget (Note [OOM recovery] in oom_recovery.cpp).
#pragma once

#include "graph/executor_policies.h"

namespace hr {

class OomRecovery final : public RecoveryPolicy {
 public:
  // The attempts after the first failure, each giving the weights half the room of the last.
  static constexpr int kAttempts = 4;

  Result<std::vector<HostTensor>> recover(RecoveryRun& run, const Status& failed) override;
};

}  // namespace hr
