// LoRA-patched UNet steps on the simulated discrete device with a GPU's habits (channels-last
// convolutions, GEMM workspaces): under a budget that the resident weights' patching (its scratch
// and workspace, Note [resident patch room]) would overrun if the plan left no room for it, the
// steps run, stream and give the unbudgeted run's output bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "async_sim_backend.h"
#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "models/lora_cases.h"
#include "models/sd/sd_unet.h"
#include "models/sd/unet.h"

namespace hr {
namespace {
using namespace test;

class LoraSimStreaming : public ::testing::TestWithParam<size_t> {};

TEST_P(LoraSimStreaming, PatchingHasRoomBesideThePlan) {
  const size_t pad = GetParam();
  auto sim = std::make_unique<AsyncSimBackend>(SimOrder::COPIES_LATE);
  sim->set_discrete(true);
  sim->set_channels_last(true);
  sim->set_workspace_pad(pad);
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok());
  auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
  const HostTensor x = ld("unet.sd1.x"), t = ld("unet.sd1.timesteps"), c = ld("unet.sd1.context");
  Applied a;
  a.backend = std::move(sim);
  apply(cases()["sd1_stack"], DType::F32, a);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  SDUNet& unet = *sd_unet(*a.model);
  std::vector<HostTensor> want;
  {
    Executor ex(*a.backend, *a.alloc, executor_policies_default(*a.backend));
    for (int i = 0; i < 2; ++i) {
      auto out = unet_run(ex, unet.config, *a.diffusion, unet.dtype, x, t, c);
      ASSERT_TRUE(out.ok()) << out.status().str();
      want.push_back(std::move(*out));
    }
    a.diffusion->bind(nullptr, nullptr);
  }
  auto graph = unet_graph(unet.config, x.shape()[0], x.shape()[2], x.shape()[3], c.shape()[1],
                          unet.dtype);
  ASSERT_TRUE(graph.ok());
  Executor probe(*a.backend, *a.alloc, executor_policies_default(*a.backend));
  a.diffusion->bind(a.backend.get(), a.alloc.get());
  auto compiled = probe.compile(*graph);
  ASSERT_TRUE(compiled.ok());
  const uint64_t extra = Executor::patch_room(**compiled, *a.diffusion, nullptr);
  const uint64_t budget = (*compiled)->plan->arena_bytes + (*compiled)->weight_bytes / 2 + extra;
  Allocator tight(*a.backend, budget, eviction_policy());
  Executor ex(*a.backend, tight, executor_policies_default(*a.backend));
  a.diffusion->bind(a.backend.get(), &tight);
  for (int i = 0; i < 2; ++i) {
    auto out = unet_run(ex, unet.config, *a.diffusion, unet.dtype, x, t, c);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_TRUE(ex.last_residency().streams()) << "the budget should make it stream";
    EXPECT_EQ(std::memcmp(out->data(), want[size_t(i)].data(), out->bytes()), 0) << "step " << i;
  }
  a.diffusion->bind(nullptr, nullptr);
}

// 16 MiB of workspace per GEMM: an all-resident plan fits the weights' room, and patching them
// does not (the H200's failure, CudaLoraStreaming).
INSTANTIATE_TEST_SUITE_P(Workspace, LoraSimStreaming,
                         ::testing::Values(size_t(0), size_t(16) << 20));
}  // namespace
}  // namespace hr
