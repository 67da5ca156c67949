// Admission by plan and the execution messages, without running anything.
#include "jobs/admission.h"

#include <gtest/gtest.h>

#include "jobs/job_messages.h"

namespace hr {
namespace {

WorkflowPlan plan_of(bool fits) {
  WorkflowPlan p;
  p.budget = 16ull << 20;
  p.peak = 12ull << 20;
  p.fits = fits;
  p.smallest_budget = 23ull << 20;
  NodePlan a;
  a.node_id = "4";
  a.class_type = "CheckpointLoaderSimple";
  NodePlan b;
  b.node_id = "3";
  b.class_type = "KSampler";
  b.fits = fits;
  p.nodes = {a, b};
  if (!fits) p.why_not = "node 3 (KSampler): activation arena 22.5 MiB does not fit";
  return p;
}

TEST(Admission, FittingPlanRuns) {
  Admission a = admission_decide(plan_of(true));
  EXPECT_TRUE(a.admit);
  EXPECT_EQ(a.planned_peak, 12ull << 20);
  EXPECT_TRUE(a.unplanned.empty());
}

TEST(Admission, PlanThatCannotFitFailsNamingNodeAndSmallestBudget) {
  Admission a = admission_decide(plan_of(false));
  EXPECT_FALSE(a.admit);
  EXPECT_EQ(a.node_id, "3");
  EXPECT_EQ(a.class_type, "KSampler");
  EXPECT_NE(a.message.find("16.0 MiB"), std::string::npos) << a.message;
  EXPECT_NE(a.message.find("at least 23.0 MiB"), std::string::npos) << a.message;
  EXPECT_NE(a.message.find("activation arena"), std::string::npos) << a.message;
}

TEST(Admission, NoPlanStillRuns) {
  Admission a = admission_decide(
      Result<WorkflowPlan>(Status(ErrorCode::INVALID_ARGUMENT, "node 1 (LoadImage): cannot plan")));
  EXPECT_TRUE(a.admit);
  EXPECT_NE(a.unplanned.find("cannot plan"), std::string::npos);
}

TEST(JobMessages, ComfyUiFields) {
  EXPECT_TRUE(msg_executing("p", "")["node"].is_null());
  EXPECT_EQ(msg_executing("p", "3")["display_node"], "3");
  const Json prog = msg_progress("p", "3", 2, 20);
  EXPECT_EQ(prog, (Json{{"value", 2}, {"max", 20}, {"prompt_id", "p"}, {"node", "3"}}));
  JobFailure f{"8", "VAEDecode", {"4", "3"}, "boom", "headroom.OUT_OF_MEMORY", {}};
  const Json err = msg_execution_error("p", f);
  for (const char* k :
       {"prompt_id", "node_id", "node_type", "executed", "exception_message", "exception_type",
        "traceback", "current_inputs", "current_outputs", "timestamp"})
    EXPECT_TRUE(err.contains(k)) << k;
  EXPECT_EQ(msg_status(3)["status"]["exec_info"]["queue_remaining"], 3);
  EXPECT_EQ(msg_execution_interrupted("p", f)["node_id"], "8");
}

TEST(JobId, Uuid4) {
  const std::string a = prompt_id_new(), b = prompt_id_new();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '4');
  EXPECT_EQ(a[8], '-');
}

}  // namespace
}  // namespace hr
