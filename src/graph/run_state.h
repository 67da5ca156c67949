// One run of a compiled graph as the run strategies (plain, timed, captured) share it: the
// graph and its residency plan, where every value lives (RunBindings), the copy schedule of a
// streamed run (stream_copies.h) and a timed run's marks (node_timing.h). And the buffers an
// executor keeps between runs (RunBuffers).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/tensor.h"
#include "graph/compiled_graph.h"
#include "graph/node_timing.h"
#include "graph/residency.h"

namespace hr {

class WeightSource;

// The activation arena and the staging ring an executor keeps between runs (Note [arena reuse]
// in executor_run.cpp); `gen` counts their allocations (Note [captures and freed memory]).
struct RunBuffers {
  DeviceBuffer arena;
  DeviceBuffer ring;
  uint64_t gen = 0;
};

// Where one run's values are.
struct RunBindings {
  std::vector<const HostTensor*> bound;  // INPUT values' host tensors, by ValueId
  std::vector<ValueId> inputs;           // INPUT values, copied before the first node
  // Page-locked copies of the inputs a captured run copies from (Note [captured steps]).
  const std::vector<std::pair<void*, size_t>>* staging = nullptr;
  char* base = nullptr;  // the arena
  char* ring = nullptr;
  Stream* stream = nullptr;         // the compute stream
  std::vector<void*> ptr;           // device pointer of each weight storage value, by ValueId
  std::vector<const void*> host;    // per weight use: host source when streamed
  // Note [patched streaming]: the run's weight source, and per weight use whether a streamed
  // one is patched in the ring after its copy.
  WeightSource* source = nullptr;
  std::vector<uint8_t> patched;
};

// The copies of one streamed run (Note [streamed execution] in stream_copies.cpp): which
// streamed uses each node reads first and last, their issue order, and the issue cursor.
struct CopySchedule {
  std::vector<std::vector<size_t>> first_at, last_at;  // per node: streamed uses
  std::vector<size_t> order;  // streamed uses in first-use order
  // The issue cursor, reset before the ops are issued: the next use to copy; per use its copy's
  // group (Note [coalesced copies]; group g records its `copied` event); the latest node the
  // copy stream and group the compute stream waited for.
  size_t next = 0;
  std::vector<int64_t> group;
  int64_t groups = 0, compute_waited = -1;
  int32_t copy_waited = -1;

  void cursor_reset(size_t uses) {
    next = 0;
    groups = 0;
    copy_waited = -1;
    compute_waited = -1;
    group.assign(uses, -1);
  }
};

struct RunState {
  std::shared_ptr<const CompiledGraph> compiled;
  const Graph& g;
  const ArenaPlan& plan;
  const std::vector<WeightUse>& uses;
  const ResidencyPlan& res;
  RunBindings at;
  CopySchedule copies;
  RunMarks marks;

  RunState(std::shared_ptr<const CompiledGraph> c, const ResidencyPlan& r)
      : compiled(std::move(c)), g(compiled->graph), plan(*compiled->plan),
        uses(compiled->weights), res(r) {}
  void* value_ptr(ValueId v) const {
    const ValueId s = g.storage_of(v);
    const ValueSlot& slot = plan.values[size_t(s)];
    return slot.offset >= 0 ? static_cast<void*>(at.base + slot.offset) : at.ptr[size_t(s)];
  }
  // What a capture depends on besides the arena: every weight's device and host address.
  // The run's weight bindings, as a capture is keyed on them (executor_captured.cpp).
  std::vector<const void*> signature() const;
};

}  // namespace hr
