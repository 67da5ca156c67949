// GraphCache: built graphs by key (Note [graph reuse]).
#include "graph/graph_cache.h"

namespace hr {

// Note [graph reuse]
// Samplers call the diffusion model with the same shapes at every step. Building its graph
// (hundreds of nodes with their names, shape inference and the structure key) costs host time
// during which the device would sit idle between two replayed steps, so built graphs are kept per
// configuration and shape (a handful; the cache starts over when full). The executor then finds
// its compiled plan by the graph's structure key.
Result<std::shared_ptr<const Graph>> GraphCache::get(const std::string& key,
                                                     const std::function<Result<Graph>()>& build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
  }
  HR_ASSIGN_OR_RETURN(Graph g, build());
  auto shared = std::make_shared<const Graph>(std::move(g));
  std::lock_guard<std::mutex> lock(mu_);
  if (graphs_.size() >= 8) graphs_.clear();
  graphs_.emplace(key, shared);
  return shared;
}

}  // namespace hr
