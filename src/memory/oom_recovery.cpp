// OOM recovery: drop caches, ask idle holders for room, plan again with a tighter weights limit
// and retry.
#include "memory/oom_recovery.h"

#include <fmt/format.h>

namespace hr {

// Note [OOM recovery]
// A run plans within the room it sees (Executor::weights_room), so an allocation fails only when
// the device refused memory the budget allowed (another process took it) or when the source held
// device copies the plan did not count. Then the run frees what it caches (captured steps, its
// ring and arena, all device copies of its weights) and what idle holders cache, and plans
// again with the weights (resident and ring) limited to what the device has free now beside
// the arena, streaming more; then to half of that, and so on four times. Only when every
// attempt fails does the error reach the caller, naming the segments.
Result<std::vector<HostTensor>> OomRecovery::recover(RecoveryRun& run, const Status& failed) {
  run.caches_drop();
  run.holders_reclaim();
  // What the device reports free is more than small allocations can use (they are carved from
  // 2 MiB pages): each further attempt gives the weights half as much of it.
  Result<std::vector<HostTensor>> out = failed;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    uint64_t limit = UINT64_MAX;  // device memory is host memory: nothing to learn from "free"
    const uint64_t free = run.device_free();
    if (free != UINT64_MAX) {
      const uint64_t usable = free - free / 20, arena = run.arena_bytes();
      limit = (usable > arena ? usable - arena : 0) >> attempt;
    }
    out = run.retry(limit);
    if (out.ok() || out.status().code() != ErrorCode::OUT_OF_MEMORY) return out;
    run.caches_drop();
  }
  return out.status().with_context(
      fmt::format("after an allocation failed ({}) and the run was planned again",
                  failed.message()));
}

}  // namespace hr
