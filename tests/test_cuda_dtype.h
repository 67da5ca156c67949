// The fixture of GPU tests parameterised by a dtype: a CUDA backend, or a skip (Note [required
// GPU] in test_gpu.h).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "backend/backend.h"
#include "test_gpu.h"

namespace hr::test {

class CudaDtypeTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    auto b = cuda_backend_create(0);
    HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
    backend_ = std::move(b).value();
  }
  std::unique_ptr<Backend> backend_;
};

}  // namespace hr::test
