// admission_decide: the plan's verdict turned into run / fail-now.
#include "jobs/admission.h"

#include "core/bytes.h"

namespace hr {

Admission admission_decide(const Result<WorkflowPlan>& plan) {
  Admission a;
  if (!plan.ok()) {
    a.unplanned = plan.status().message();  // Note [admission without a plan]
    return a;
  }
  a.planned_peak = plan->peak;
  if (plan->fits) return a;
  a.admit = false;
  for (const NodePlan& n : plan->nodes) {
    if (n.fits) continue;
    a.node_id = n.node_id;
    a.class_type = n.class_type;
    break;
  }
  // why_not names the node and its segments (workflow_plan's wording).
  const std::string why = !plan->why_not.empty() ? plan->why_not
                          : a.node_id.empty()
                              ? std::string("no plan fits")
                              : fmt::format("node {} ({}) does not fit", a.node_id, a.class_type);
  a.message = fmt::format(
      "cannot run within the memory budget of {}: {}; the workflow needs a budget of at least {}",
      bytes_format(plan->budget), why, bytes_format(plan->smallest_budget));
  return a;
}

}  // namespace hr
