// Residency as data: a compiled graph's weight uses on the node clock, the options and the plan
// (which weights stay on the device, which stream through a staging ring, and when each copy
// may start) that the executor carries out and `headroom plan` prints. The planner that makes
// the plans is memory policy (memory/residency_planner.h, Note [changing residency]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace hr {

struct ArenaPlan;

// One weight storage value a compiled graph reads.
struct WeightUse {
  ValueId value = kNoValue;  // the WEIGHT value (its storage) in the compiled graph
  uint64_t bytes = 0;        // rounded to the allocator's alignment, as it will be held
  int32_t first = -1;        // first and last node reading it
  int32_t last = -1;
  // Output elements per weight element row of the first reader (batch x positions for a
  // convolution or a linear layer): how many FLOPs each weight byte pays for, roughly. Low
  // reuse means its copy cannot hide behind the compute that uses it.
  double reuse = 0;
  // Estimated seconds of the call's compute before the first reader, and through the last
  // reader: where in the call the weight is needed and released (Note [node clock]).
  double t_first = 0;
  double t_last = 0;
};

// How long a node takes on a device, roughly (Note [node clock] in residency.cpp): the larger of
// its FLOPs at the compute rate (attention at its own) and the bytes it reads and writes at the
// memory rate, plus a launch cost.
struct NodeClock {
  double flops_per_s = 1e12;
  double attention_flops_per_s = 1e12;
  double bytes_per_s = 0;  // 0: memory traffic costs nothing
  double node_s = 0;
};

// Estimated seconds of node i of g (0 for views).
double node_seconds(const Graph& g, const ArenaPlan& plan, size_t i, const NodeClock& clock);

// The weights of g in first-use order, with the node range reading each and where in the call
// (on `clock`) they are needed.
std::vector<WeightUse> weight_uses(const Graph& g, const ArenaPlan& plan,
                                   const NodeClock& clock = {});

struct ResidencyOptions {
  // The ring holds at least this many of the largest streamed weights (copies in flight ahead
  // of compute); at least 2.
  uint32_t depth = 4;
  // Weights smaller than this stay resident while anything can (a copy this small costs more
  // in launch latency than its bytes).
  uint64_t small_bytes = 256 * 1024;
  // The most bytes one host-to-device transfer moves when neighbouring streamed weights are
  // copied together (Note [coalesced copies] in stream_copies.cpp): large enough that the ~10 us a
  // transfer costs beyond its bytes stops mattering, small enough that compute rarely waits for
  // a group's later weights to arrive before it can read the first.
  uint64_t group_bytes = 8ull << 20;
  // False: every weight stays resident and a graph whose weights do not fit fails with
  // OUT_OF_MEMORY instead of streaming (--gpu-only; `headroom bench`'s resident mode).
  bool stream = true;
  // Host-to-device copy rate (bytes per second) with which the planner estimates how long
  // compute waits for copies on the clock of WeightUse::t_first and picks the ring and the
  // streamed set that wait least (Notes [ring choice], [spreading copies] in memory/); 0: the
  // smallest ring that fits (the most resident bytes), streamed set by reuse alone.
  double copy_bytes_per_s = 0;
  // The clock weight_uses times the graph with (Note [node clock]). This and copy_bytes_per_s
  // come from the device's profile (residency_options_for in memory/residency_clock.h).
  NodeClock clock;
  // With a copy rate: plan the streamed set on the clock and improve it by swaps (Note
  // [spreading copies]); false: the set by reuse alone.
  bool spread = true;
};

struct ResidencyPlan {
  // Per WeightUse: -1 resident, else its byte offset in the staging ring.
  std::vector<int64_t> offset;
  // Per WeightUse, for streamed weights: the node after which its copy may start (the last
  // reader of the earlier weights whose bytes of the ring it overwrites), -1 when it overwrites
  // none of this call's (copied before node 0).
  std::vector<int32_t> copy_after;
  uint64_t ring_bytes = 0;  // 0: everything resident
  uint64_t resident_bytes = 0;
  uint64_t streamed_bytes = 0;  // copied on every call
  uint64_t largest_streamed = 0;
  uint64_t room = 0;  // bytes it was planned within (weights + ring)
  size_t streamed_count = 0;
  // Estimated time compute waits for copies per call, in seconds and as the bytes one could copy
  // in that time (Note [ring choice] in memory/residency_planner.cpp; 0 when
  // ResidencyOptions::copy_bytes_per_s is 0).
  double stall_s = 0;
  double stall_bytes = 0;
  // Swaps of a streamed weight for resident ones that spread the copies (Note [spreading copies]).
  size_t swaps = 0;

  bool streams() const { return ring_bytes > 0; }
  bool streamed(size_t k) const { return !offset.empty() && offset[k] >= 0; }
  uint64_t device_bytes() const { return resident_bytes + ring_bytes; }
};

// "streams 8.1 MiB of 12.3 MiB weights (140 of 200 tensors) through a 4.8 MiB ring; 4.2 MiB
// resident".
std::string residency_describe(const ResidencyPlan& plan, const std::vector<WeightUse>& uses);

}  // namespace hr
