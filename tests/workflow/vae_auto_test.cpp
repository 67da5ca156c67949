// The README's example workflow (examples/default_workflow.json, 256x256, less its sampler:
// Note [sampler skipped]) on a `make-model --size tiny` sd1 checkpoint, f32 on the CPU, under an
// allocator budget of 40 MiB: VAEDecode tiles (Note [VAE auto tiling] in models/sd/vae_tiled.cpp),
// says so in a MEMORY event, and no allocation goes over the budget. On the CPU the weights are
// host memory the allocator does not count; the budget covers the arenas.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/bytes.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/make_model.h"
#include "nodes/nodes.h"
#include "test_paths.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

TEST(VAEAuto, DefaultWorkflowTilesTheDecodeUnder40MiB) {
  struct TempDir {
    fs::path path = fs::temp_directory_path() / fmt::format("hr_vae_auto_{}", ::getpid());
    TempDir() {
      fs::remove_all(path);
      fs::create_directories(path / "models/checkpoints");
    }
    ~TempDir() { fs::remove_all(path); }
  } tmp;
  const fs::path& dir = tmp.path;
  MakeModelSpec spec;
  spec.arch = "sd1";
  spec.size = ModelSize::TINY;
  spec.dtype = DType::F32;
  auto written =
      make_model_write(spec, (dir / "models/checkpoints/headroom-tiny-sd1.safetensors").string());
  ASSERT_TRUE(written.ok()) << written.status().str();

  std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
  ASSERT_TRUE(f.good());
  Json wf = Json::parse(f);
  // Note [sampler skipped]: KSampler is cut out (VAEDecode reads EmptyLatentImage's 256x256
  // latent): on the CPU the tiny UNet's self-attention over 32x32 = 1024 tokens takes ~16 s a
  // step on one thread, 20 steps would take minutes, and the sampler's latent does not change
  // what this test checks (the VAE decode's plan and budget).
  ASSERT_EQ(wf["8"]["class_type"], "VAEDecode");
  ASSERT_EQ(wf["5"]["inputs"]["width"], 256);
  wf["8"]["inputs"]["samples"] = Json::array({"5", 0});
  for (const char* id : {"3", "6", "7"}) wf.erase(id);
  NodeRegistry registry;
  nodes_register(registry, NodeEnv{(dir / "models").string(), (dir / "input").string()});
  PromptValidation v = prompt_validate(wf, registry);
  ASSERT_TRUE(v.ok) << v.summary();

  constexpr uint64_t kBudget = 40ull << 20;
  std::unique_ptr<Backend> backend = cpu_backend_create(1);
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  alloc.set_budget(kBudget);  // what `headroom run --vram-budget 40MiB` sets
  Executor ex(*backend, alloc, executor_policies_default(*backend));
  ExecOptions o;
  o.models_dir = (dir / "models").string();
  o.output_dir = (dir / "output").string();
  o.backend = backend.get();
  o.allocator = &alloc;
  o.executor = &ex;
  std::vector<ExecEvent> memory;
  o.on_event = [&memory](const ExecEvent& e) {
    if (e.kind == ExecEvent::Kind::MEMORY) memory.push_back(e);
  };
  PromptExecutor pe;
  Result<ExecResult> r = pe.execute(v.prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().str();

  ASSERT_EQ(memory.size(), 1u);
  EXPECT_EQ(memory[0].node_id, "8");
  EXPECT_EQ(memory[0].class_type, "VAEDecode");
  EXPECT_NE(memory[0].message.find("VAE decode tiled"), std::string::npos) << memory[0].message;
  std::printf("  %s; allocator peak %s of %s\n", memory[0].message.c_str(),
              bytes_format(alloc.total().peak).c_str(), bytes_format(kBudget).c_str());
  EXPECT_LE(alloc.total().peak, kBudget);
  EXPECT_EQ(alloc.total().failures, 0u);
  ASSERT_EQ(r->ui_outputs.at("9")["images"].size(), 1u);
}

}  // namespace
}  // namespace hr
