// workflow_plan against real runs: the README's default workflow on a `make-model --size tiny`
// sd1 checkpoint, f32 on the CPU, planned and then run; the predicted allocator-level peak must
// be within 2 % of Allocator::total().peak, and the VAE decision under a budget the one the run
// reports.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "backend/allocator.h"
#include "core/alignment.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/make_model.h"
#include "nodes/nodes.h"
#include "test_paths.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"
#include "workflow/workflow_plan.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class WorkflowPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_wf_plan_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models/checkpoints");
    MakeModelSpec spec;
    spec.arch = "sd1";
    spec.size = ModelSize::TINY;
    spec.dtype = DType::F32;
    auto w = make_model_write(spec, (dir_ / "models/checkpoints/headroom-tiny-sd1.safetensors").string());
    ASSERT_TRUE(w.ok()) << w.status().str();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    backend_ = cpu_backend_create(1);
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
    ASSERT_TRUE(f.good());
    wf_ = Json::parse(f);
    wf_["3"]["inputs"]["steps"] = 1;
    wf_["5"]["inputs"]["width"] = 128;
    wf_["5"]["inputs"]["height"] = 128;
  }

  Prompt validated(const Json& wf) {
    PromptValidation v = prompt_validate(wf, registry_);
    EXPECT_TRUE(v.ok) << v.summary();
    return v.prompt;
  }

  Result<WorkflowPlan> plan(const Prompt& p, uint64_t budget) {
    WorkflowPlanOptions o;
    o.backend = backend_.get();
    o.budget = budget;
    o.models_dir = (dir_ / "models").string();
    return workflow_plan(p, o);
  }

  struct RunResult {
    bool ok = false;
    std::string error;
    uint64_t peak = 0;
    std::vector<std::string> memory;  // MEMORY event messages
  };
  RunResult run(const Prompt& p, uint64_t budget) {
    Allocator alloc(*backend_, budget, eviction_policy());
    Executor ex(*backend_, alloc, executor_policies_default(*backend_));
    ExecOptions o;
    o.models_dir = (dir_ / "models").string();
    o.output_dir = (dir_ / "output").string();
    o.backend = backend_.get();
    o.allocator = &alloc;
    o.executor = &ex;
    RunResult rr;
    o.on_event = [&rr](const ExecEvent& e) {
      if (e.kind == ExecEvent::Kind::MEMORY) rr.memory.push_back(e.message);
    };
    PromptExecutor pe;
    Result<ExecResult> r = pe.execute(p, o);
    rr.ok = r.ok();
    if (!r.ok()) rr.error = r.status().str();
    rr.peak = alloc.total().peak;
    return rr;
  }

  static void expect_within_2pct(uint64_t predicted, uint64_t real) {
    std::printf("  predicted peak %llu, real %llu (%.3f %%)\n", (unsigned long long)predicted,
                (unsigned long long)real, 100.0 * (double(predicted) - double(real)) / double(real));
    EXPECT_LE(std::fabs(double(predicted) - double(real)), 0.02 * double(real));
  }

  static fs::path dir_;
  std::unique_ptr<Backend> backend_;
  NodeRegistry registry_;
  Json wf_;
};
fs::path WorkflowPlanTest::dir_;

TEST_F(WorkflowPlanTest, DefaultWorkflowPeakMatchesTheRun) {
  Prompt p = validated(wf_);
  auto pl = plan(p, UINT64_MAX);
  ASSERT_TRUE(pl.ok()) << pl.status().str();
  std::printf("%s", workflow_plan_format(*pl).c_str());
  EXPECT_TRUE(pl->fits);
  ASSERT_EQ(pl->nodes.size(), 7u);
  EXPECT_EQ(pl->nodes.back().class_type, "SaveImage");
  EXPECT_GT(pl->smallest_budget, 0u);
  EXPECT_LE(pl->smallest_budget, pl->peak);
  RunResult r = run(p, Allocator::kUnlimited);
  ASSERT_TRUE(r.ok) << r.error;
  expect_within_2pct(pl->peak, r.peak);
}

TEST_F(WorkflowPlanTest, TiledDecodeUnderABudgetIsTheRunsDecision) {
  // As vae_auto_test (Note [sampler skipped] there): VAEDecode reads the 256x256 empty latent.
  wf_["5"]["inputs"]["width"] = 256;
  wf_["5"]["inputs"]["height"] = 256;
  wf_["8"]["inputs"]["samples"] = Json::array({"5", 0});
  for (const char* id : {"3", "6", "7"}) wf_.erase(id);
  Prompt p = validated(wf_);
  constexpr uint64_t kBudget = 40ull << 20;
  auto pl = plan(p, kBudget);
  ASSERT_TRUE(pl.ok()) << pl.status().str();
  std::printf("%s", workflow_plan_format(*pl).c_str());
  EXPECT_TRUE(pl->fits);
  const NodePlan* dec = nullptr;
  for (const NodePlan& n : pl->nodes)
    if (n.class_type == "VAEDecode") dec = &n;
  ASSERT_NE(dec, nullptr);
  EXPECT_NE(dec->decision.find("tiled"), std::string::npos) << dec->decision;
  RunResult r = run(p, kBudget);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.memory.size(), 1u);
  EXPECT_EQ(dec->decision, r.memory[0]);
  expect_within_2pct(pl->peak, r.peak);
  EXPECT_LE(r.peak, kBudget);
}

TEST_F(WorkflowPlanTest, TooSmallABudgetGivesTheSmallestThatRuns) {
  Prompt p = validated(wf_);
  auto pl = plan(p, 1ull << 20);
  ASSERT_TRUE(pl.ok()) << pl.status().str();
  EXPECT_FALSE(pl->fits);
  EXPECT_FALSE(pl->why_not.empty());
  ASSERT_GT(pl->smallest_budget, 1ull << 20);
  auto at = plan(p, pl->smallest_budget);
  ASSERT_TRUE(at.ok());
  EXPECT_TRUE(at->fits);
  auto below = plan(p, pl->smallest_budget - kDeviceAlignment);
  ASSERT_TRUE(below.ok());
  EXPECT_FALSE(below->fits);
  RunResult r = run(p, pl->smallest_budget);
  ASSERT_TRUE(r.ok) << r.error;
  expect_within_2pct(at->peak, r.peak);
}

// A node's own error (here a checkpoint that is not there) is the plan's error, naming the node.
TEST_F(WorkflowPlanTest, ANodesErrorNamesTheNode) {
  wf_["4"]["inputs"]["ckpt_name"] = "headroom-tiny-sd1.safetensors";
  Prompt p = validated(wf_);
  fs::rename(dir_ / "models/checkpoints/headroom-tiny-sd1.safetensors", dir_ / "moved.safetensors");
  auto pl = plan(p, UINT64_MAX);
  fs::rename(dir_ / "moved.safetensors", dir_ / "models/checkpoints/headroom-tiny-sd1.safetensors");
  ASSERT_FALSE(pl.ok());
  EXPECT_NE(pl.status().str().find("node 4 (CheckpointLoaderSimple)"), std::string::npos)
      << pl.status().str();
}

}  // namespace
}  // namespace hr
