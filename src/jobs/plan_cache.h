// Workflow plans the worker made, by prompt and budget, so that a prompt queued again (ComfyUI
// clients re-queue the same graph all the time) is admitted without planning it again.
#pragma once

#include <deque>
#include <map>
#include <string>

#include "workflow/workflow_plan.h"

namespace hr {

// Note [plan cache]: workflow_plan is a function of the validated prompt, the options (budget,
// dtype, backend) and the model files' headers; planning the tiny checkpoint's graph costs
// ~100 ms of CPU, more than a job whose outputs the executor has cached. Entries are keyed by
// the prompt's nodes and the budget (the rest of the options are the server's, fixed), and the
// cache is cleared with the models (POST /free), after which a replaced model file is read again.
class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 64) : capacity_(capacity) {}
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // workflow_plan(prompt, options), or the same call's earlier result. Worker thread only.
  Result<WorkflowPlan> plan(const Prompt& prompt, const WorkflowPlanOptions& options);
  void clear();
  size_t hits() const { return hits_; }

 private:
  size_t capacity_;
  std::map<std::string, Result<WorkflowPlan>> plans_;
  std::deque<std::string> order_;  // oldest first: evicted past capacity
  size_t hits_ = 0;
};

}  // namespace hr
