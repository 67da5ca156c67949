// LoRA numerics against ComfyUI's: every case of tests/data/lora/cases.json (a LoRA file of each
// format on the tiny SD1/SDXL checkpoints, made by make_lora_golden.py with ComfyUI's load_lora
// and calculate_weight) read by lora_patches_read, applied by PatchedWeights on the CPU backend
// (the same ops the GPU runs) and compared with ComfyUI's patched tensors: float32 within 1e-6
// of the tensor's largest magnitude, f16 as ComfyUI rounds it. (The goldens' @bf16 start from the
// f16 checkpoint's weights, which a bf16 model never holds, so they are not compared here.)
#include <gtest/gtest.h>

#include "models/lora_cases.h"

namespace hr {
namespace {

using namespace test;

class LoraPatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraPatchTest, F32MatchesComfyUI) { check_case(GetParam(), DType::F32, nullptr); }
TEST_P(LoraPatchTest, F16RoundsAsComfyUI) { check_case(GetParam(), DType::F16, nullptr); }

INSTANTIATE_TEST_SUITE_P(Cases, LoraPatchTest,
                         ::testing::Values("sd1_kohya", "sd1_peft", "sd1_loha", "sd1_lokr",
                                           "sd1_dora", "sd1_diff", "sdxl_kohya", "sdxl_peft",
                                           "sd1_stack"));

}  // namespace
}  // namespace hr
