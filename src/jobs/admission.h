// Admission of a job by its memory plan (workflow/workflow_plan.h): a plan that fits the budget
// runs; one that cannot fit at all fails at once, naming the node and the smallest budget that
// would fit, instead of running into an out-of-memory error halfway.
#pragma once

#include <string>

#include "core/status.h"
#include "jobs/job.h"
#include "workflow/workflow_plan.h"

namespace hr {

struct Admission {
  bool admit = true;
  // When !admit: the node that cannot run and why, for execution_error.
  std::string node_id;
  std::string class_type;
  std::string message;
  // Admitted without a plan (a node class the planner does not know): why, else empty.
  std::string unplanned;
  uint64_t planned_peak = 0;  // allocator-level peak of the whole workflow (0: unplanned)
};

// Note [admission without a plan]: a plan is the prompt run on the planning backend (Note [plan
// run] in workflow/workflow_plan.cpp), so it fails only where a node's own code fails (a file
// gone, an input the node refuses), which the run would then report in that node. Such a job
// still runs, and says so: a kept headroom_memory message with level "unplanned" (in the job's
// status and its history entry) and /metrics' unplanned count. Only a plan that exists and does
// not fit rejects a job.
Admission admission_decide(const Result<WorkflowPlan>& plan);

}  // namespace hr
