// Compile: a graph -> the graph passes -> its arena plan and weight uses, cached by structure
// key in the executor's bounded plan cache (compile_cache.h).
#include "graph/executor.h"

#include "graph/compiled_graph.h"

namespace hr {

Result<std::shared_ptr<const CompiledGraph>> compiled_graph_make(const Graph& g, Backend& backend,
                                                                 const CompileSettings& settings,
                                                                 const NodeClock& clock) {
  auto c = std::make_shared<CompiledGraph>();
  if (settings.passes && settings.forced) {
    HR_ASSIGN_OR_RETURN(c->graph, graph_passes(g, *settings.forced));
  } else if (settings.passes) {
    HR_ASSIGN_OR_RETURN(c->graph, graph_passes(g, backend));
  } else {
    c->graph = g;
  }
  HR_ASSIGN_OR_RETURN(ArenaPlan p, arena_plan(c->graph, backend));
  c->plan = std::make_shared<const ArenaPlan>(std::move(p));
  c->weights = weight_uses(c->graph, *c->plan, clock);
  for (const WeightUse& u : c->weights) c->weight_bytes += u.bytes;
  return std::shared_ptr<const CompiledGraph>(std::move(c));
}

Result<std::shared_ptr<const CompiledGraph>> Executor::compile(const Graph& g) {
  if (!g.status().ok()) return g.status().with_context("graph has a build error");
  const std::string& key = g.structure_key();
  CompileSettings settings;
  if (std::shared_ptr<const CompiledGraph> hit = plans_.find(key, settings)) return hit;
  // Compiled outside the cache's lock: a second thread compiling the same key wastes only time.
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c,
                      compiled_graph_make(g, backend_, settings, residency_options().clock));
  return plans_.insert(key, std::move(c));
}

Result<std::shared_ptr<const ArenaPlan>> Executor::plan(const Graph& g) {
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, compile(g));
  return c->plan;
}

}  // namespace hr
