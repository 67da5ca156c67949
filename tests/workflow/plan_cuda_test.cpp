// The plan is the run on the GPU too: full-size SD1.5 (512x512) and SDXL (1024x1024, with
// CLIPTextEncodeSDXL) checkpoints of random f16 weights, planned and run on CUDA in f16 without
// a budget and under budgets that stream the UNet's weights and tile the VAE; the predicted
// allocator-level peak must be within 2 % of Allocator::total().peak, and the plan must fit
// exactly when the run does. Full-size files take ~9 GB of disk and a minute to write, so the
// test runs only where a GPU is (label gpu; it skips elsewhere, Note [required GPU]).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/make_model.h"
#include "nodes/nodes.h"
#include "test_gpu.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"
#include "workflow/workflow_plan.h"
#include "workflow_json.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

using test::link;
using test::node;

Json text_to_image(const std::string& ckpt, int size, bool sdxl) {
  Json wf = {
      {"4", node("CheckpointLoaderSimple", {{"ckpt_name", ckpt}})},
      {"5", node("EmptyLatentImage", {{"width", size}, {"height", size}, {"batch_size", 1}})},
      {"3", node("KSampler", {{"seed", 1}, {"steps", 2}, {"cfg", 7.0}, {"sampler_name", "euler"},
                              {"scheduler", "normal"}, {"denoise", 1.0}, {"model", link("4")},
                              {"positive", link("6")}, {"negative", link("7")},
                              {"latent_image", link("5")}})},
      {"8", node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}})},
      {"9", node("SaveImage", {{"filename_prefix", "gpu"}, {"images", link("8")}})}};
  for (const auto& [id, text] : {std::pair{"6", "a lighthouse"}, std::pair{"7", ""}}) {
    if (!sdxl) {
      wf[id] = node("CLIPTextEncode", {{"text", text}, {"clip", link("4", 1)}});
      continue;
    }
    wf[id] = node("CLIPTextEncodeSDXL",
                  {{"width", size}, {"height", size}, {"crop_w", 0}, {"crop_h", 0},
                   {"target_width", size}, {"target_height", size}, {"text_g", text},
                   {"text_l", text}, {"clip", link("4", 1)}});
  }
  return wf;
}

class PlanCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Backend>> b = cuda_backend_create(0);
    HR_SKIP_UNLESS_GPU(b.ok(), b.status().str());
    backend_ = std::move(b).value();
    dir_ = fs::temp_directory_path() / fmt::format("hr_plan_cuda_{}", ::getpid());
    fs::create_directories(dir_ / "models/checkpoints");
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string checkpoint(const char* arch) {
    const std::string name = fmt::format("{}-full-f16.safetensors", arch);
    MakeModelSpec spec;
    spec.arch = arch;
    spec.size = ModelSize::FULL;
    spec.dtype = DType::F16;
    auto w = make_model_write(spec, (dir_ / "models/checkpoints" / name).string());
    EXPECT_TRUE(w.ok()) << w.status().str();
    return name;
  }

  // Plans and runs `wf` under `budget`; prints both peaks.
  void expect_plan_is_run(const Json& wf, uint64_t budget) {
    PromptValidation v = prompt_validate(wf, registry_);
    ASSERT_TRUE(v.ok) << v.summary();
    WorkflowPlanOptions po;
    po.backend = backend_.get();
    po.compute_dtype = DType::F16;
    po.budget = budget;
    po.models_dir = (dir_ / "models").string();
    po.find_smallest_budget = false;
    Result<WorkflowPlan> pl = workflow_plan(v.prompt, po);
    ASSERT_TRUE(pl.ok()) << pl.status().str();
    Allocator alloc(*backend_, budget, eviction_policy());
    Executor ex(*backend_, alloc, executor_policies_default(*backend_));
    ExecOptions o;
    o.models_dir = po.models_dir;
    o.output_dir = (dir_ / "output").string();
    o.backend = backend_.get();
    o.compute_dtype = DType::F16;
    o.allocator = &alloc;
    o.executor = &ex;
    auto pe = std::make_unique<PromptExecutor>();
    Result<ExecResult> r = pe->execute(v.prompt, o);
    pe.reset();  // the models give their bytes back before the allocator goes
    const uint64_t real = alloc.total().peak;
    std::printf("  budget %s: predicted peak %llu, real %llu (%+.3f %%), fits %d, ran %d\n",
                budget == UINT64_MAX ? "none" : fmt::format("{} MiB", budget >> 20).c_str(),
                (unsigned long long)pl->peak, (unsigned long long)real,
                100.0 * (double(pl->peak) - double(real)) / double(real), int(pl->fits),
                int(r.ok()));
    for (const NodePlan& n : pl->nodes)
      std::printf("    node %s %s: peak %llu; %s\n", n.node_id.c_str(), n.class_type.c_str(),
                  (unsigned long long)n.peak, n.decision.substr(0, 160).c_str());
    EXPECT_EQ(pl->fits, r.ok()) << (r.ok() ? pl->why_not : r.status().str());
    EXPECT_LE(std::fabs(double(pl->peak) - double(real)), 0.02 * double(real));
  }

  std::unique_ptr<Backend> backend_;
  fs::path dir_;
  NodeRegistry registry_;
};

TEST_F(PlanCudaTest, FullSizeSD15) {
  const Json wf = text_to_image(checkpoint("sd1"), 512, false);
  for (uint64_t budget : {uint64_t(UINT64_MAX), uint64_t(1536) << 20, uint64_t(1024) << 20}) expect_plan_is_run(wf, budget);
}

TEST_F(PlanCudaTest, FullSizeSDXL) {
  const Json wf = text_to_image(checkpoint("sdxl"), 1024, true);
  for (uint64_t budget : {uint64_t(UINT64_MAX), uint64_t(4096) << 20, uint64_t(2560) << 20}) expect_plan_is_run(wf, budget);
}

}  // namespace
}  // namespace hr
