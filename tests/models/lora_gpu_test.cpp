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
  Applied a;
  a.backend = std::move(b);
  apply(cases()["sd1_stack"], DType::F16, a);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  check_streamed_patched_steps(a, 3);
}

}  // namespace
}  // namespace hr
