// The arena planner: value lifetimes -> offsets in one activation arena, computed in a dry
// run before anything is allocated. The plan is plain data that can be printed and shown.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/kernels.h"
#include "core/alignment.h"
#include "core/bytes.h"
#include "core/status.h"
#include "graph/graph.h"

namespace hr {

// Where one value lives. Times are node indices: a value is live from `first` (the node that
// defines it; 0 for an INPUT, since inputs are copied in before the first node, Note [inputs in
// the arena] in planner.cpp) to `last` (its last reader, its views' readers included; outputs
// live to the last node). `offset` is -1 for values outside the arena: weights and views of weights.
struct ValueSlot {
  int64_t offset = -1;
  uint64_t bytes = 0;  // the tensor's own bytes (not rounded)
  int32_t first = -1;
  int32_t last = -1;
  // The value whose slot this one shares: itself, the root of a RESHAPE view, or the first
  // value of an in-place chain (Note [in-place] in planner.cpp). Values with different
  // `storage` never overlap in the arena while both are live.
  ValueId storage = kNoValue;
};

struct NodeSlot {
  uint64_t workspace_offset = 0;
  uint64_t workspace_bytes = 0;  // BackendKernels::op_workspace; 0 when the op needs none
  uint64_t live_bytes = 0;       // arena bytes live while this node runs (workspace included)
  bool in_place = false;         // the output reuses an input's slot
  bool view = false;             // RESHAPE: no kernel runs, the output aliases the input
};

struct ArenaPlan {
  // Every offset and slot size is a multiple of kDeviceAlignment (core/alignment.h).
  std::vector<ValueSlot> values;  // indexed by ValueId
  std::vector<NodeSlot> nodes;    // indexed by node index
  uint64_t arena_bytes = 0;       // the planned activation peak: one allocation of this size
  uint64_t lower_bound = 0;       // max over nodes of live_bytes: no placement can do better
  uint64_t weight_bytes = 0;      // all WEIGHT values (bound outside the arena)
  uint64_t input_bytes = 0;       // INPUT values (copied into arena slots)
  uint64_t output_bytes = 0;      // outputs (copied out after the last node)
  uint64_t workspace_peak = 0;    // largest single node workspace
  std::string strategy;           // which placement order won ("size-desc/best-fit", ...)

  // arena_bytes / lower_bound (1 when both are 0).
  double ratio() const {
    return lower_bound ? double(arena_bytes) / double(lower_bound) : 1.0;
  }
};

// Whether the planner may give node `n`'s output the slot of one of its inputs (Note [in-place]
// in planner.cpp): element-wise ops whose output element i depends only on input element i.
// Every backend must accept output.data == inputs[k].data for these ops.
bool op_allows_in_place(const Graph& g, const Node& n, ValueId input);

// Plans g's activation arena for `kernels` (which supply op workspace sizes). Fails when
// g.status() is not OK. Deterministic: the same graph and kernels give the same plan.
Result<ArenaPlan> arena_plan(const Graph& g, const BackendKernels& kernels);

// The plan as a table: per node index, op, name, output shape, output bytes, workspace and
// live bytes; then totals for weights, arena, workspace, lower bound and arena/lower bound.
std::string plan_format(const Graph& g, const ArenaPlan& plan);


}  // namespace hr
