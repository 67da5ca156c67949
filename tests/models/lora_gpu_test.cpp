// LoRA on the GPU: the patch ops on CUDA give ComfyUI's patched weights (the CPU test's cases and
// criteria, tests/models/lora_cases.h), and a UNet whose patched weights stream through the ring
// (patched there after each copy, inside captured steps) gives the resident patched run's output
// bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "models/lora_cases.h"
#include "models/sd/sd_unet.h"
#include "models/sd/unet.h"
#include "test_gpu.h"

namespace hr {
namespace {

using namespace test;

std::unique_ptr<Backend> cuda_or_skip() {
  auto b = cuda_backend_create(0);
  return b.ok() ? std::move(b).value() : nullptr;
}

class CudaLora : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLora, F32MatchesComfyUI) {
  auto b = cuda_or_skip();
  HR_SKIP_UNLESS_GPU(b != nullptr, "no CUDA device");
  check_case(GetParam(), DType::F32, std::move(b));
}

TEST_P(CudaLora, F16RoundsAsComfyUI) {
  auto b = cuda_or_skip();
  HR_SKIP_UNLESS_GPU(b != nullptr, "no CUDA device");
  check_case(GetParam(), DType::F16, std::move(b));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaLora,
                         ::testing::Values("sd1_kohya", "sd1_loha", "sd1_lokr", "sd1_dora",
                                           "sd1_diff", "sdxl_kohya", "sd1_stack"));

// Several UNet steps of the tiny SD1 with the stacked LoRAs, f16: resident, then under a budget
// that streams most weights (captured after the first run), bit for bit the same.
TEST(CudaLoraStreaming, StreamedPatchedStepsMatchResident) {
  auto b = cuda_or_skip();
  HR_SKIP_UNLESS_GPU(b != nullptr, "no CUDA device");
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok());
  auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
  const HostTensor x = ld("unet.sd1.x"), t = ld("unet.sd1.timesteps"), c = ld("unet.sd1.context");
  Applied a;
  a.backend = std::move(b);
  apply(cases()["sd1_stack"], DType::F16, a);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  SDUNet& unet = *sd_unet(*a.model);
  std::vector<HostTensor> want;
  {
    Executor ex(*a.backend, *a.alloc, executor_policies_default(*a.backend));
    for (int i = 0; i < 3; ++i) {
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
  a.diffusion->bind(a.backend.get(), a.alloc.get());  // patch_room asks the bound backend
  auto compiled = probe.compile(*graph);
  ASSERT_TRUE(compiled.ok());
  const uint64_t budget = (*compiled)->plan->arena_bytes + (*compiled)->weight_bytes / 2 +
                          Executor::patch_room(**compiled, *a.diffusion, nullptr);
  Allocator tight(*a.backend, budget, eviction_policy());
  Executor ex(*a.backend, tight, executor_policies_default(*a.backend));
  a.diffusion->bind(a.backend.get(), &tight);
  for (int i = 0; i < 3; ++i) {
    auto out = unet_run(ex, unet.config, *a.diffusion, unet.dtype, x, t, c);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_TRUE(ex.last_residency().streams()) << "the budget should make it stream";
    EXPECT_EQ(std::memcmp(out->data(), want[size_t(i)].data(), out->bytes()), 0) << "step " << i;
  }
  EXPECT_GT(a.diffusion->streamed_patches(), 0u);
  a.diffusion->bind(nullptr, nullptr);
}

}  // namespace
}  // namespace hr
