// Note [ring choice]: with a FLOP-per-byte rate the planner trades resident bytes for a larger
// ring when copies would otherwise idle behind resident compute and then stall the tail.
#include <gtest/gtest.h>

#include "graph/residency.h"
#include "memory/residency_planner.h"

namespace hr {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr double kRate = 5000;  // FLOP per byte copied, the GPU's estimate

ResidencyOptions timed() {
  ResidencyOptions o;
  o.copy_bytes_per_s = 1.0 / kRate;  // the test's clock ticks FLOPs
  o.spread = true;
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
  u.t_first = first;
  u.t_last = last;
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
  ResidencyOptions o;  // copy_bytes_per_s 0
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
  EXPECT_GE(p->stall_bytes, 1.0 * double(kMiB));  // the tail waits, and the plan says so
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
  // (The ring choice alone: without swaps, Note [spreading copies].)
  std::vector<WeightUse> uses = bursts(4);
  ResidencyOptions ring_only = timed();
  ring_only.spread = false;
  Result<ResidencyPlan> p = residency_plan(uses, 16 * kMiB, ring_only);
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->ring_bytes, 8 * kMiB);
  EXPECT_EQ(p->resident_bytes, 8 * kMiB);
  EXPECT_LT(p->stall_bytes, 0.01 * double(kMiB));
  Result<ResidencyPlan> fixed = residency_plan(uses, 16 * kMiB, ResidencyOptions());
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->ring_bytes, 4 * kMiB);
  // Feasibility never changes with the rate: the same smallest room.
  EXPECT_EQ(residency_min_room(uses, ResidencyOptions()), residency_min_room(uses, timed()));
  // With swaps the smallest ring moves half its stall into the stretches (copies of burst 2
  // and 3 weights swapped for burst 1 ones, read after a longer idle copy stream); the plan's
  // estimated stall plus its extra streamed bytes is no worse than the larger ring's.
  Result<ResidencyPlan> spread = residency_plan(uses, 16 * kMiB, timed());
  ASSERT_TRUE(spread.ok());
  EXPECT_LE(spread->stall_bytes, 4.0 * double(kMiB));
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

// Note [spreading copies]: eight low-reuse weights read one per long stretch of compute (resident
// by reuse), then eight high-reuse weights read back to back at the end (streamed by reuse). The
// end cluster needs twice the ring at once, so half of it is copied while compute waits. Swapping
// end weights for middle ones lets their copies run during the stretches.
std::vector<WeightUse> middle_and_end() {
  std::vector<WeightUse> uses;
  double at = 0;
  for (int k = 0; k < 8; ++k, at += 1e13) uses.push_back(weight_at(k, kMiB, 1, at, at + 1e13));
  for (int k = 0; k < 8; ++k) uses.push_back(weight_at(8 + k, kMiB, 1000, at, at));
  return uses;
}

TEST(SpreadingCopies, SwapsClusteredCopiesForOnesThatHide) {
  std::vector<WeightUse> uses = middle_and_end();
  ResidencyOptions clustered = timed();
  clustered.spread = false;
  Result<ResidencyPlan> before = residency_plan(uses, 12 * kMiB, clustered);
  ASSERT_TRUE(before.ok()) << before.status().str();
  EXPECT_EQ(before->swaps, 0u);
  EXPECT_GT(before->stall_bytes, 3.0 * double(kMiB));
  Result<ResidencyPlan> after = residency_plan(uses, 12 * kMiB, timed());
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->swaps, 0u);
  EXPECT_LT(after->stall_bytes, 0.5 * before->stall_bytes);
  // Still within the room, and at least as many bytes resident as the room less the ring allows
  // less one weight (a swap may free a little more than it takes).
  EXPECT_LE(after->device_bytes(), 12 * kMiB);
  EXPECT_EQ(after->streamed_bytes + after->resident_bytes, 16 * kMiB);
  // Some middle weights now stream (their copies hide behind the stretches).
  size_t middle_streamed = 0;
  for (size_t k = 0; k < 8; ++k) middle_streamed += after->streamed(k) ? 1 : 0;
  EXPECT_GT(middle_streamed, 0u);
}

}  // namespace
}  // namespace hr
