// PlanCache: a bounded map from (prompt nodes, budget) to workflow_plan's result.
#include "jobs/plan_cache.h"

namespace hr {
namespace {

// Seeds and output file names change no shape and no byte count; a client that queues one graph
// with new seeds or prefixes (the common case) keeps hitting the cache.
bool input_unplanned(const std::string& name) {
  return name == "seed" || name == "noise_seed" || name == "filename_prefix";
}

std::string plan_key(const Prompt& prompt, const WorkflowPlanOptions& o) {
  std::string key = std::to_string(o.budget) + " " + std::to_string(o.weights_cap);
  for (const auto& [id, n] : prompt.nodes) {
    key += "\n" + id + " " + n.class_type;
    for (const auto& [name, value] : n.inputs.items())
      if (!input_unplanned(name)) key += " " + name + "=" + value.dump();
  }
  for (const std::string& o : prompt.outputs) key += "\n>" + o;
  return key;
}

}  // namespace

Result<WorkflowPlan> PlanCache::plan(const Prompt& prompt, const WorkflowPlanOptions& options) {
  std::string key = plan_key(prompt, options);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    ++hits_;
    return it->second;
  }
  Result<WorkflowPlan> p = workflow_plan(prompt, options);
  if (capacity_ == 0) return p;
  if (plans_.size() >= capacity_) {
    plans_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  plans_.emplace(std::move(key), p);
  return p;
}

void PlanCache::clear() {
  plans_.clear();
  order_.clear();
}

}  // namespace hr
