// Note [ring choice]: with a FLOP-per-byte rate the planner trades resident bytes for a larger
// ring when copies would otherwise idle behind resident compute and then stall the tail.
#include <gtest/gtest.h>

#include "graph/residency.h"

namespace hr {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr double kRate = 5000;  // FLOP per byte copied, the GPU's estimate

ResidencyOptions timed() {
  ResidencyOptions o;
  o.flops_per_byte = kRate;
  return o;
}

// The weight read by node `node` only, needed at `first` FLOPs into the call and released at
// `last`.
WeightUse weight_at(int node, uint64_t bytes, double reuse, double first, double last) {
  WeightUse u;
  u.value = ValueId(node);
  u.bytes = bytes;
  u.first = u.last = node;
  u.reuse = reuse;
  u.flops_first = first;
  u.flops_last = last;
  return u;
}

// A UNet-like call: one large low-reuse weight read through a long middle section of compute,
// then `late` streamable weights of 1 MiB whose readers each compute `tail_flops`.
std::vector<WeightUse> unet_like(int late, double mid_flops, double tail_flops) {
  std::vector<WeightUse> uses{weight_at(0, 4 * kMiB, 1, 0, mid_flops)};
  double at = mid_flops;
  for (int k = 0; k < late; ++k, at += tail_flops)
    uses.push_back(weight_at(k + 1, kMiB, 1000, at, at + tail_flops));
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

TEST(RingChoice, OneGapCannotPayForALargerRing) {
  // Long middle, then a copy-bound tail: whatever the ring, the tail copies total minus room
  // bytes after the middle, so a larger ring only streams more. The smallest ring stays.
  std::vector<WeightUse> uses = unet_like(16, 1e13, 0.5 * kRate * double(kMiB));
  Result<ResidencyPlan> p = residency_plan(uses, 12 * kMiB, timed());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ring_bytes, 4 * kMiB);
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_GT(p->stall_bytes, 1.0 * double(kMiB));  // the tail waits, and the plan says so
}

// `gaps` bursts of eight 1 MiB weights read back to back (no compute of their own), each after
// a long stretch of compute that reads no weight.
std::vector<WeightUse> bursts(int gaps) {
  std::vector<WeightUse> uses;
  double at = 0;
  for (int g = 0; g < gaps; ++g) {
    at += 1e13;
    for (int k = 0; k < 8; ++k) uses.push_back(weight_at(int(uses.size()), kMiB, 1000, at, at));
  }
  return uses;
}

TEST(RingChoice, ManyGapsGetALargerRing) {
  // Smallest ring (4 MiB): 12 MiB resident, and bursts 2 and 3 each copy 4 MiB while compute
  // waits (8 MiB of stall). A ring of 8 MiB streams 4 MiB more but prefetches each whole burst
  // during the stretch before it: no stall. Its score (0 + 4) beats the smallest ring's (8).
  std::vector<WeightUse> uses = bursts(4);
  Result<ResidencyPlan> p = residency_plan(uses, 16 * kMiB, timed());
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->ring_bytes, 8 * kMiB);
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_LT(p->stall_bytes, 0.01 * double(kMiB));
  Result<ResidencyPlan> fixed = residency_plan(uses, 16 * kMiB, ResidencyOptions());
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->ring_bytes, 4 * kMiB);
  // Feasibility never changes with the rate: the same smallest room.
  EXPECT_EQ(residency_min_room(uses, ResidencyOptions()), residency_min_room(uses, timed()));
}

TEST(RingChoice, ComputeBoundTailKeepsTheSmallestRing) {
  // Each tail reader computes ten times its copy: the small ring already hides every copy.
  std::vector<WeightUse> uses = unet_like(16, 1e13, 10 * kRate * double(kMiB));
  Result<ResidencyPlan> p = residency_plan(uses, 12 * kMiB, timed());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ring_bytes, 4 * kMiB);
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_LT(p->stall_bytes, 0.1 * double(kMiB));
}

}  // namespace
}  // namespace hr
