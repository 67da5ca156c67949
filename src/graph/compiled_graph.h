// A graph as the executor runs it: after the graph passes for a backend, with its arena plan and
// its weight uses on the residency clock; compiled_graph_make makes one (executor_compile.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"
#include "graph/passes.h"
#include "graph/planner.h"
#include "graph/residency.h"

namespace hr {

struct CompiledGraph {
  Graph graph;
  std::shared_ptr<const ArenaPlan> plan;
  std::vector<WeightUse> weights;  // in first-use order (graph/residency.h)
  uint64_t weight_bytes = 0;       // sum of weights[].bytes
};

// How graphs are compiled: passes on (the backend's choice, or exactly `forced`) or off.
struct CompileSettings {
  bool passes = true;
  std::optional<PassOptions> forced;
};

// g after the passes (Note [graph passes] in graph/passes.h), its arena plan, and its weight
// uses timed on `clock`.
Result<std::shared_ptr<const CompiledGraph>> compiled_graph_make(const Graph& g, Backend& backend,
                                                                 const CompileSettings& settings,
                                                                 const NodeClock& clock);

}  // namespace hr
