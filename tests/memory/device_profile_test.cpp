// Note [device profile]: the residency clock and copy rate come from a device's profile, and a
// slow consumer card's profile changes the plan of the same graph in the same room.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "graph/device_profile.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "graph/residency.h"
#include "graph/graph_test_util.h"
#include "graph/synthetic_unet.h"
#include "memory/executor_policies.h"
#include "memory/residency_clock.h"
#include "memory/residency_planner.h"

namespace hr {
namespace {

// An RTX 3060-like card: ~25 TFLOP/s f16 GEMM, 360 GB/s, PCIe 4 x16 at ~12 GB/s from page-locked
// memory (a consumer board's measured rate, not the link's 32 GB/s).
DeviceProfile rtx3060() {
  DeviceProfile p;
  p.device = "NVIDIA GeForce RTX 3060";
  p.gemm_flops_per_s = 25e12;
  p.attention_flops_per_s = 25e12 * kAttentionShare;
  p.memory_bytes_per_s = 360e9;
  p.node_s = 4e-6;
  p.copy_bytes_per_s = 12e9;
  p.measured = true;
  return p;
}

struct Planned {
  std::vector<WeightUse> uses;
  ResidencyPlan plan;
  double call_s = 0;  // the clock's seconds of the whole call
  uint64_t total = 0;
};

// SD1.5 512x512 batch 2 (the synthetic UNet) planned with `profile`'s rates within `fraction`
// of its weight bytes.
Planned sd15_planned(const DeviceProfile& profile, double fraction) {
  Graph g = test::unet_graph(test::UNetShape{});
  EXPECT_TRUE(g.ok()) << g.status().str();
  test::PlanKernels backend;
  Result<ArenaPlan> arena = arena_plan(g, backend);
  EXPECT_TRUE(arena.ok()) << arena.status().str();
  const ResidencyOptions o = residency_options_for(profile);
  Planned out;
  out.uses = weight_uses(g, *arena, o.clock);
  for (size_t i = 0; i < g.nodes().size(); ++i) out.call_s += node_seconds(g, *arena, i, o.clock);
  for (const WeightUse& u : out.uses) out.total += u.bytes;
  Result<ResidencyPlan> p = residency_plan(out.uses, uint64_t(double(out.total) * fraction), o);
  EXPECT_TRUE(p.ok()) << p.status().str();
  if (p.ok()) out.plan = std::move(p).value();
  return out;
}

void print(const char* name, double room, const Planned& q) {
  std::printf("%-16s room %.2f: call %6.2f ms, waits %7.3f ms (%5.1f %% of the call), ring %.1f MiB, "
              "%.1f MiB resident, %.1f MiB streamed (%zu tensors), %zu swaps\n",
              name, room, q.call_s * 1e3, q.plan.stall_s * 1e3, 100 * q.plan.stall_s / q.call_s,
              double(q.plan.ring_bytes) / (1 << 20), double(q.plan.resident_bytes) / (1 << 20),
              double(q.plan.streamed_bytes) / (1 << 20), q.plan.streamed_count, q.plan.swaps);
}

bool same_streamed_set(const Planned& a, const Planned& b) {
  if (a.uses.size() != b.uses.size()) return false;
  for (size_t k = 0; k < a.uses.size(); ++k)
    if (a.plan.streamed(k) != b.plan.streamed(k)) return false;
  return true;
}

TEST(DeviceProfile, FallbacksAreTheClocksTheyReplace) {
  // The H200's clock (Note [node clock]) and the CPU's, as they were hard-coded before profiles.
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::abs(b); };
  const ResidencyOptions gpu = residency_options_for(device_profile_default(false));
  EXPECT_TRUE(near(gpu.clock.flops_per_s, 500e12));
  EXPECT_TRUE(near(gpu.clock.attention_flops_per_s, 150e12));
  EXPECT_TRUE(near(gpu.clock.bytes_per_s, 1.2e12));
  EXPECT_TRUE(near(gpu.clock.node_s, 1.5e-6));
  EXPECT_TRUE(near(gpu.copy_bytes_per_s, 55e9));
  const ResidencyOptions cpu = residency_options_for(device_profile_default(true));
  EXPECT_TRUE(near(cpu.clock.flops_per_s, 60e9));
  EXPECT_TRUE(near(cpu.clock.attention_flops_per_s, 30e9));
  EXPECT_TRUE(near(cpu.clock.bytes_per_s, 10e9));
  EXPECT_TRUE(near(cpu.clock.node_s, 5e-6));
  EXPECT_TRUE(near(cpu.copy_bytes_per_s, 5e9));
  EXPECT_TRUE(device_profile_default(false).valid());
  EXPECT_FALSE(device_profile_default(false).measured);
  // The rates scale the clock: half the GEMM rate, half the clock's.
  DeviceProfile half = device_profile_default(false);
  half.gemm_flops_per_s /= 2;
  EXPECT_TRUE(near(residency_options_for(half).clock.flops_per_s, 250e12));
}

// SD1.5 512x512 batch 2 in the same rooms on the H200's fallback profile and on a 3060's. The
// 3060 moves the same streamed bytes at 12 instead of 55 GB/s, so compute waits longer per call
// where much streams; but its compute is 28 times slower while its link is only 4.6 times
// slower (~1,500 FLOP per byte copied against the H200's ~9,100), so copies hide behind more of
// the call: it waits a smaller share of each call, and where a quarter of the weights stream it
// waits almost nothing, where the H200 waits. An H200 behind the 3060's link (only the copy
// rate slower) waits longer at every room that streams. The streamed sets differ: the clock
// decides which copies hide.
TEST(DeviceProfile, SlowConsumerCardChangesThePlan) {
  const DeviceProfile h200 = device_profile_default(false);
  DeviceProfile slow_link = h200;
  slow_link.copy_bytes_per_s = rtx3060().copy_bytes_per_s;
  for (double room : {0.25, 0.5, 0.75, 0.9}) {
    const Planned fast = sd15_planned(h200, room);
    const Planned card = sd15_planned(rtx3060(), room);
    const Planned linked = sd15_planned(slow_link, room);
    print("H200", room, fast);
    print("RTX 3060", room, card);
    print("H200 at 12 GB/s", room, linked);
    ASSERT_TRUE(fast.plan.streams());
    // Same graph, same room: the same bytes must stream (room decides them, Note [residency
    // plan]), within the few MiB the clock's choice of tensors moves.
    EXPECT_NEAR(double(card.plan.streamed_bytes), double(fast.plan.streamed_bytes), 16.0 * (1 << 20));
    EXPECT_GT(card.call_s, 10 * fast.call_s);
    // Slower copies, same compute: compute waits longer.
    EXPECT_GT(linked.plan.stall_s, fast.plan.stall_s + 1e-3) << room;
    // Slower compute hides more of each call's copies.
    EXPECT_LE(card.plan.stall_s / card.call_s, fast.plan.stall_s / fast.call_s) << room;
    if (room <= 0.5) {
      // Much streams: 12 GB/s cannot keep up even with the 3060's compute.
      EXPECT_GT(card.plan.stall_s, fast.plan.stall_s) << room;
      EXPECT_LT(card.plan.stall_s / card.call_s, 0.5 * fast.plan.stall_s / fast.call_s) << room;
    } else if (room == 0.75) {
      EXPECT_GT(fast.plan.stall_s, 1e-3);
      EXPECT_LT(card.plan.stall_s, 0.1 * fast.plan.stall_s);
    }
    if (room == 0.5 || room == 0.75) {
      EXPECT_FALSE(same_streamed_set(card, fast)) << room;
    }
  }
}

// Executor::set_device_profile takes the profile's rates and keeps the other options.
TEST(DeviceProfile, ExecutorTakesTheProfileRates) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  Executor ex(*cpu, alloc, executor_policies_default(*cpu));
  EXPECT_EQ(ex.device_profile(), device_profile_default(true));
  ResidencyOptions o = ex.residency_options();
  o.stream = false;
  o.depth = 3;
  ex.set_residency_options(o);
  ex.set_device_profile(rtx3060());
  EXPECT_EQ(ex.device_profile(), rtx3060());
  EXPECT_EQ(ex.residency_options().copy_bytes_per_s, 12e9);
  EXPECT_EQ(ex.residency_options().clock.flops_per_s,
            residency_options_for(rtx3060()).clock.flops_per_s);
  EXPECT_FALSE(ex.residency_options().stream);
  EXPECT_EQ(ex.residency_options().depth, 3u);
}

}  // namespace
}  // namespace hr
