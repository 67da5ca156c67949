// Note [ring choice]: with a FLOP-per-byte rate the planner trades resident bytes for a larger
// ring when copies would otherwise idle behind resident compute and then stall the tail.
#include <gtest/gtest.h>

#include "graph/residency.h"

namespace hr {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A UNet-like call: one large low-reuse weight read through a long middle section of compute,
// then `late` streamable weights of 1 MiB whose readers each compute `tail_flops`.
std::vector<WeightUse> unet_like(int late, double mid_flops, double tail_flops) {
  std::vector<WeightUse> uses;
  WeightUse mid;
  mid.value = 0;
  mid.bytes = 4 * kMiB;
  mid.first = 0;
  mid.last = 0;
  mid.reuse = 1;
  mid.flops_first = 0;
  mid.flops_last = mid_flops;
  uses.push_back(mid);
  double at = mid_flops;
  for (int k = 0; k < late; ++k) {
    WeightUse u;
    u.value = ValueId(k + 1);
    u.bytes = kMiB;
    u.first = u.last = k + 1;
    u.reuse = 1000;
    u.flops_first = at;
    at += tail_flops;
    u.flops_last = at;
    uses.push_back(u);
  }
  return uses;
}

TEST(RingChoice, WithoutARateTheSmallestRingKeepsTheMostResident) {
  std::vector<WeightUse> uses = unet_like(16, 1e12, 1e9);
  ResidencyOptions o;  // flops_per_byte 0
  Result<ResidencyPlan> p = residency_plan(uses, 12 * kMiB, o);
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->ring_bytes, 4 * kMiB);  // depth 4 x the largest streamed (1 MiB)
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_EQ(p->stall_bytes, 0);  // not estimated
}

TEST(RingChoice, CopiesThatWouldIdleBehindResidentComputeGetALargerRing) {
  // Long middle (copies could all finish there), a tail whose compute per weight is below its
  // copy time: with the smallest ring most tail copies happen after the middle and stall.
  const double rate = 5000;  // FLOP per byte
  std::vector<WeightUse> uses = unet_like(16, 1e13, 0.5 * rate * double(kMiB));
  ResidencyOptions fixed;
  ResidencyOptions timed;
  timed.flops_per_byte = rate;
  Result<ResidencyPlan> small = residency_plan(uses, 12 * kMiB, fixed);
  Result<ResidencyPlan> chosen = residency_plan(uses, 12 * kMiB, timed);
  ASSERT_TRUE(small.ok() && chosen.ok());
  // The smallest ring keeps the middle weight and four tail weights resident and stalls about
  // half a copy on each of the last six tail weights (3 MiB of copy time); a ring of 8 MiB
  // prefetches eight tail weights during the middle and stalls about one copy in all.
  EXPECT_EQ(small->ring_bytes, 4 * kMiB);
  EXPECT_EQ(chosen->ring_bytes, 8 * kMiB);
  EXPECT_EQ(chosen->resident_bytes, 4 * kMiB);
  EXPECT_NEAR(chosen->stall_bytes, 1.0 * double(kMiB), 0.1 * double(kMiB));
  EXPECT_LE(chosen->device_bytes(), 12 * kMiB);
  // Feasibility never changes with the rate: the same smallest room.
  EXPECT_EQ(residency_min_room(uses, fixed), residency_min_room(uses, timed));
}

TEST(RingChoice, ComputeBoundTailKeepsTheSmallestRing) {
  // Each tail reader computes ten times its copy: the small ring already hides every copy.
  const double rate = 5000;
  std::vector<WeightUse> uses = unet_like(16, 1e13, 10 * rate * double(kMiB));
  ResidencyOptions timed;
  timed.flops_per_byte = rate;
  Result<ResidencyPlan> p = residency_plan(uses, 12 * kMiB, timed);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ring_bytes, 4 * kMiB);
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_LT(p->stall_bytes, 0.1 * double(kMiB));
}

}  // namespace
}  // namespace hr
