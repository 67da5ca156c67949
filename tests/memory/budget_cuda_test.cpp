// A budget on the GPU behaves like a smaller card: allocations stop at the budget (allocator
// level), and the device's own used memory (driver level) grows by no more than that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "memory/eviction.h"
#include "test_gpu.h"

namespace hr {
namespace {

TEST(CudaBudget, BehavesLikeASmallerCard) {
  auto b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
  Backend& gpu = **b;
  constexpr uint64_t kBudget = 256ull << 20, kBlock = 24ull << 20;
  const uint64_t free_before = gpu.info().memory_free;
  Allocator alloc(gpu, kBudget, eviction_policy());
  std::vector<DeviceBuffer> held;
  for (int i = 0; i < 64; ++i) {
    Result<DeviceBuffer> r = alloc.allocate(kBlock, Pool::ACTIVATIONS, "block");
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), ErrorCode::OUT_OF_MEMORY);
      break;
    }
    held.push_back(std::move(r).value());
  }
  EXPECT_EQ(held.size(), size_t(kBudget / kBlock));  // 10 blocks of 24 MiB in 256 MiB
  EXPECT_LE(alloc.total().peak, kBudget);
  const uint64_t free_after = gpu.info().memory_free;
  // Driver level: the card lost at most the budget (plus the driver's 2 MiB granularity).
  EXPECT_LE(free_before - std::min(free_before, free_after), kBudget + (32ull << 20));
  std::printf("budget 256 MiB: %zu blocks of 24 MiB, allocator peak %llu MiB, driver-level free "
              "dropped %lld MiB\n",
              held.size(), (unsigned long long)(alloc.total().peak >> 20),
              (long long)(free_before - free_after) / (1 << 20));
}

}  // namespace
}  // namespace hr
