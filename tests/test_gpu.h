// GPU tests skip where there is no GPU, and fail where one is required.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace hr::test {

// Note [required GPU]: CI has no GPU, so CUDA tests skip there. The GPU scripts
// (scripts/device.sh, through scripts/device/env.sh) set HEADROOM_REQUIRE_GPU=1, and then a test that
// cannot get a CUDA device fails with the CUDA error instead of skipping, so a broken driver, a
// failed CUDA initialisation or a CPU-only build on the GPU machine cannot pass as green.
// HEADROOM_EXPECT_GPU is the older name of the switch and still works.

// Whether a switch value turns it on: set, non-empty and not "0".
inline bool gpu_switch_on(const char* value) {
  return value && *value && std::strcmp(value, "0") != 0;
}

// What a GPU test does when it has no CUDA device, given the two variables' values.
enum class NoGpu { SKIP, FAIL };
inline NoGpu no_gpu_action(const char* require, const char* expect) {
  return gpu_switch_on(require) || gpu_switch_on(expect) ? NoGpu::FAIL : NoGpu::SKIP;
}
inline NoGpu no_gpu_action() {
  return no_gpu_action(std::getenv("HEADROOM_REQUIRE_GPU"), std::getenv("HEADROOM_EXPECT_GPU"));
}
inline bool gpu_required() { return no_gpu_action() == NoGpu::FAIL; }

}  // namespace hr::test

// Skips (or fails, Note [required GPU]) the current test with `why` when `ok` is false.
#define HR_SKIP_UNLESS_GPU(ok, why)                                                              \
  if (!(ok)) {                                                                                   \
    if (::hr::test::gpu_required())                                                              \
      GTEST_FAIL() << "HEADROOM_REQUIRE_GPU is set but there is no usable CUDA device: " << why; \
    GTEST_SKIP() << "no CUDA device: " << why;                                                   \
  }
