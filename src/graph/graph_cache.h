// Built graphs kept by their caller's key (a model's configuration and shapes), so that a
// sampler's steps do not build the same graph again (Note [graph reuse]).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "graph/graph.h"

namespace hr {

class GraphCache {
 public:
  // The graph kept under `key`, else `build`'s, kept (a handful; the cache starts over when full).
  Result<std::shared_ptr<const Graph>> get(const std::string& key,
                                           const std::function<Result<Graph>()>& build);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Graph>> graphs_;
};

}  // namespace hr
