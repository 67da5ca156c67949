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
  auto sim = std::make_unique<AsyncSimBackend>(SimOrder::COPIES_LATE);
  sim->set_discrete(true);
  sim->set_channels_last(true);
  sim->set_workspace_pad(GetParam());
  Applied a;
  a.backend = std::move(sim);
  apply(cases()["sd1_stack"], DType::F32, a);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  check_streamed_patched_steps(a, 2);
}

// 16 MiB of workspace per GEMM: an all-resident plan fits the weights' room, and patching them
// does not (the H200's failure, CudaLoraStreaming).
INSTANTIATE_TEST_SUITE_P(Workspace, LoraSimStreaming,
                         ::testing::Values(size_t(0), size_t(16) << 20));
}  // namespace
}  // namespace hr
