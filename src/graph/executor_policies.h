// The decisions the executor takes from memory policy (Note [executor policies]): which weights
// of a compiled graph stay resident and which stream (ResidencyPolicy), and what to do when an
// allocation of a run fails (RecoveryPolicy). graph/ declares them; memory/ implements them
// (memory/executor_policies.h gives the defaults every Executor is built with).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/device_profile.h"
#include "graph/residency.h"

namespace hr {

struct CompiledGraph;  // graph/compiled_graph.h

// Note [executor policies]
// The executor is mechanism: it compiles, binds, copies, captures and runs what it is told.
// Two questions are policy and live in memory/ (layers: graph/ may not include memory/): which
// of a graph's weights stay on the device within the room a run has (the residency planner) and
// how a run that hit an allocation failure tries again (OOM recovery). The executor asks them
// through these interfaces and carries out their answers: a ResidencyPlan is plain data, and a
// RecoveryPolicy composes the steps a RecoveryRun offers.
class ResidencyPolicy {
 public:
  virtual ~ResidencyPolicy() = default;
  // The residency plan for `compiled`'s weights within `room` bytes (resident weights plus the
  // ring); OUT_OF_MEMORY when not even a ring for the streamed weights fits.
  virtual Result<ResidencyPlan> decide(const std::shared_ptr<const CompiledGraph>& compiled,
                                       uint64_t room) = 0;
  // The smallest room decide accepts for `compiled`.
  virtual uint64_t min_room(const CompiledGraph& compiled) const = 0;
  // The options it plans with (ring depth, small weights, copy groups, the clock); setting them
  // drops the plans made so far.
  virtual const ResidencyOptions& options() const = 0;
  virtual void set_options(const ResidencyOptions& options) = 0;
  // The device whose rates the clock and copy rate come from; setting it changes only those
  // options and drops the plans made so far.
  virtual const DeviceProfile& device_profile() const = 0;
  virtual void set_device_profile(const DeviceProfile& profile) = 0;
  // Plans made (not served from a cache) and the CPU milliseconds the last one took.
  virtual size_t plans_made() const = 0;
  virtual double plan_ms() const = 0;
};

// The steps of one run that a RecoveryPolicy can take, offered by the executor while the run's
// lock is held.
class RecoveryRun {
 public:
  virtual ~RecoveryRun() = default;
  // Frees what the run caches: captured steps, the ring and the arena, the device copies of
  // the run's weights and the allocator's idle weight blocks.
  virtual void caches_drop() = 0;
  // Asks every idle holder of device memory to give back all it can (Allocator::reclaim).
  virtual void holders_reclaim() = 0;
  // Bytes the device reports free now; UINT64_MAX where device memory is host memory.
  virtual uint64_t device_free() const = 0;
  // The run's activation arena (its plan's bytes).
  virtual uint64_t arena_bytes() const = 0;
  // Plans the run's residency again with its weights (resident and ring) limited to
  // `weights_limit` bytes and runs it.
  virtual Result<std::vector<HostTensor>> retry(uint64_t weights_limit) = 0;
};

class RecoveryPolicy {
 public:
  virtual ~RecoveryPolicy() = default;
  // Called when a run failed with OUT_OF_MEMORY (`failed`): the outputs of a run that then
  // succeeded, or the error to report.
  virtual Result<std::vector<HostTensor>> recover(RecoveryRun& run, const Status& failed) = 0;
};

// What an Executor is built with; both set (memory/executor_policies.h).
struct ExecutorPolicies {
  std::unique_ptr<ResidencyPolicy> residency;
  std::unique_ptr<RecoveryPolicy> recovery;
};

}  // namespace hr
