// GPU tests skip where there is no GPU, and fail where one is expected.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace hr::test {

// Note [expected GPU]: CI has no GPU, so CUDA tests skip there. The GPU scripts
// (scripts/device-*.sh) set HEADROOM_EXPECT_GPU=1, and then a test that cannot get a CUDA
// device fails instead of skipping, so a broken driver or a CPU-only build on the GPU machine
// cannot pass as green.
inline bool gpu_expected() {
  const char* e = std::getenv("HEADROOM_EXPECT_GPU");
  return e && *e && std::strcmp(e, "0") != 0;
}

}  // namespace hr::test

// Skips (or fails, Note [expected GPU]) the current test with `why` when `ok` is false.
#define HR_SKIP_UNLESS_GPU(ok, why)                                            \
  if (!(ok)) {                                                                 \
    if (::hr::test::gpu_expected()) GTEST_FAIL() << "no CUDA device: " << why; \
    GTEST_SKIP() << "no CUDA device: " << why;                                 \
  }
