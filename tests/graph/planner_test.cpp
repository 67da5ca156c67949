// Arena planner: hand-computed peaks, in-place and view sharing, workspaces, determinism,
// property tests on random graphs and the SD1.5-shaped UNet bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "graph/planner.h"
#include "graph_test_util.h"
#include "synthetic_unet.h"

namespace hr {
namespace {

using test::PlanKernels;

TensorDesc f32(std::initializer_list<int64_t> d) { return TensorDesc{DType::F32, Shape(d)}; }

ArenaPlan plan_or_die(const Graph& g, const BackendKernels& b) {
  Result<ArenaPlan> p = arena_plan(g, b);
  EXPECT_TRUE(p.ok()) << p.status().str();
  return p.ok() ? std::move(p).value() : ArenaPlan{};
}

// x(4 KiB) -> a(2 KiB) -> b(8 KiB) -> c(1 KiB): the peak is the largest adjacent pair, b + a.
TEST(Planner, ChainPeakIsLargestAdjacentPair) {
  Graph g;
  ValueId x = g.input("x", f32({1, 1024}));
  ValueId a = g.linear(x, g.weight("w0", f32({512, 1024})));
  ValueId b = g.linear(a, g.weight("w1", f32({2048, 512})));
  ValueId c = g.linear(b, g.weight("w2", f32({256, 2048})));
  g.output(c, "c");
  ASSERT_TRUE(g.ok()) << g.status().str();
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_EQ(p.nodes[0].live_bytes, 4096u + 2048u);
  EXPECT_EQ(p.nodes[1].live_bytes, 2048u + 8192u);
  EXPECT_EQ(p.nodes[2].live_bytes, 8192u + 1024u);
  EXPECT_EQ(p.lower_bound, 10240u);
  EXPECT_EQ(p.arena_bytes, 10240u);
  EXPECT_EQ(p.weight_bytes, uint64_t(512 * 1024 + 2048 * 512 + 256 * 2048) * 4);
  EXPECT_EQ(p.input_bytes, 4096u);
  EXPECT_EQ(p.output_bytes, 1024u);
}

// x feeds a and b, then a + b. x is live through node 1; the add writes over a (in place).
TEST(Planner, DiamondPeak) {
  Graph g;
  ValueId x = g.input("x", f32({1, 1024}));
  ValueId a = g.linear(x, g.weight("wa", f32({1024, 1024})), kNoValue, "a");
  ValueId b = g.linear(x, g.weight("wb", f32({1024, 1024})), kNoValue, "b");
  ValueId c = g.add(a, b, "c");
  g.output(c, "c");
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_EQ(p.nodes[1].live_bytes, 3 * 4096u);
  EXPECT_TRUE(p.nodes[2].in_place);
  EXPECT_EQ(p.nodes[2].live_bytes, 2 * 4096u);
  EXPECT_EQ(p.values[size_t(c)].offset, p.values[size_t(a)].offset);
  EXPECT_EQ(p.lower_bound, 3 * 4096u);
  EXPECT_EQ(p.arena_bytes, 3 * 4096u);
}

// Element-wise chains reuse one slot; an output or a value read later is never overwritten.
TEST(Planner, InPlaceChainUsesOneSlot) {
  Graph g;
  ValueId x = g.input("x", f32({4, 256}));
  ValueId h = g.unary(OpKind::SILU, x);
  h = g.scale(h, 2.0f);
  h = g.unary(OpKind::GELU, h);
  g.output(h, "y");
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_EQ(p.arena_bytes, 4096u);
  EXPECT_TRUE(p.nodes[0].in_place && p.nodes[1].in_place && p.nodes[2].in_place);

  Graph k;  // x is an output: silu must not write over it
  x = k.input("x", f32({4, 256}));
  h = k.unary(OpKind::SILU, x);
  ValueId r = k.add(h, x);  // x read after silu: silu cannot take x's slot
  k.output(r, "r");
  k.output(x, "x");
  p = plan_or_die(k, be);
  EXPECT_TRUE(test::plan_check(k, p));
  EXPECT_FALSE(p.nodes[0].in_place);
  EXPECT_TRUE(p.nodes[1].in_place);  // r over h (h dies there; x is an output)
  EXPECT_NE(p.values[size_t(r)].offset, p.values[size_t(x)].offset);
  EXPECT_EQ(p.arena_bytes, 2 * 4096u);
}

// A broadcast operand cannot be overwritten in place: its elements are read many times.
TEST(Planner, BroadcastOperandIsNotOverwritten) {
  Graph g;
  ValueId a = g.input("a", f32({1, 256}));
  ValueId b = g.input("b", f32({8, 256}));
  ValueId a2 = g.unary(OpKind::SILU, a);  // a2 [1, 256] dies at the add
  ValueId c = g.add(a2, g.unary(OpKind::GELU, b));
  g.output(c, "c");
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_NE(p.values[size_t(c)].storage, p.values[size_t(a2)].storage);
}

// A view takes no space and keeps its storage alive until the view's last reader.
TEST(Planner, ViewExtendsStorageLifetime) {
  Graph g;
  ValueId x = g.input("x", f32({8, 128}));
  ValueId a = g.linear(x, g.weight("w", f32({128, 128})), kNoValue, "a");  // node 0
  ValueId v = g.reshape(a, Shape{4, 256}, "v");                            // node 1
  ValueId v2 = g.reshape(v, Shape{1024}, "v2");                            // node 2
  ValueId b = g.linear(x, g.weight("w2", f32({64, 128})), kNoValue, "b");  // node 3
  ValueId c = g.unary(OpKind::SILU, v2, "c");                              // node 4
  g.output(c, "c");
  g.output(b, "b");
  EXPECT_EQ(g.value(v).view_of, a);
  EXPECT_EQ(g.value(v2).view_of, a);  // chains resolve to the root storage
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_TRUE(p.nodes[1].view && p.nodes[2].view);
  EXPECT_EQ(p.values[size_t(a)].last, 4);
  EXPECT_EQ(p.values[size_t(v2)].offset, p.values[size_t(a)].offset);
  EXPECT_TRUE(p.nodes[4].in_place);  // silu over the view's storage, which dies there
  EXPECT_EQ(p.nodes[3].live_bytes, 4096u + 4096u + 2048u);
}

TEST(Planner, ViewOfOutputKeepsStorageToTheEnd) {
  Graph g;
  ValueId x = g.input("x", f32({8, 128}));
  ValueId a = g.linear(x, g.weight("w", f32({128, 128})));
  g.output(g.reshape(a, Shape{1024}), "flat");
  ValueId b = g.unary(OpKind::SILU, a);  // must not write over a: its view is an output
  g.output(g.linear(b, g.weight("w2", f32({16, 128}))), "y");
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_FALSE(p.nodes[2].in_place);
  EXPECT_EQ(p.values[size_t(a)].last, 3);
}

TEST(Planner, WorkspaceIsLiveOnlyAtItsNode) {
  Graph g;
  ValueId x = g.input("x", f32({1, 1024}));
  ValueId a = g.linear(x, g.weight("w0", f32({1024, 1024})));
  ValueId b = g.linear(a, g.weight("w1", f32({1024, 1024})));
  g.output(b, "b");
  PlanKernels be;
  be.workspace = [](OpKind, std::span<const TensorDesc>, const TensorDesc&) { return size_t(1000); };
  ArenaPlan p = plan_or_die(g, be);
  EXPECT_TRUE(test::plan_check(g, p));
  EXPECT_EQ(p.nodes[0].workspace_bytes, 1000u);
  EXPECT_EQ(p.nodes[0].live_bytes, 4096u * 2 + 1024u);  // rounded to the alignment
  EXPECT_EQ(p.workspace_peak, 1000u);
  EXPECT_EQ(p.arena_bytes, p.lower_bound);
  // Workspaces of different nodes may share memory: the arena is 2 tensors + 1 workspace.
  EXPECT_EQ(p.arena_bytes, 4096u * 2 + 1024u);
}

TEST(Planner, FailedGraphDoesNotPlan) {
  Graph g;
  ValueId x = g.input("x", f32({2, 3}));
  g.linear(x, g.weight("w", f32({4, 5})), kNoValue, "bad");
  PlanKernels be;
  Result<ArenaPlan> p = arena_plan(g, be);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bad"), std::string::npos) << p.status().str();
}

TEST(Planner, EmptyAndTrivialGraphs) {
  PlanKernels be;
  Graph empty;
  ArenaPlan p = plan_or_die(empty, be);
  EXPECT_EQ(p.arena_bytes, 0u);
  Graph passthrough;  // an input marked as output, no nodes
  passthrough.output(passthrough.input("x", f32({3, 5})), "x");
  p = plan_or_die(passthrough, be);
  EXPECT_EQ(p.arena_bytes, 256u);
  EXPECT_EQ(p.values[0].offset, 0);
}

bool plans_equal(const ArenaPlan& a, const ArenaPlan& b) {
  if (a.values.size() != b.values.size() || a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.values.size(); ++i) {
    const ValueSlot &x = a.values[i], &y = b.values[i];
    if (x.offset != y.offset || x.bytes != y.bytes || x.first != y.first || x.last != y.last ||
        x.storage != y.storage)
      return false;
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const NodeSlot &x = a.nodes[i], &y = b.nodes[i];
    if (x.workspace_offset != y.workspace_offset || x.workspace_bytes != y.workspace_bytes ||
        x.live_bytes != y.live_bytes || x.in_place != y.in_place || x.view != y.view)
      return false;
  }
  return a.arena_bytes == b.arena_bytes && a.lower_bound == b.lower_bound &&
         a.strategy == b.strategy;
}

size_t fake_workspace(OpKind kind, std::span<const TensorDesc>, const TensorDesc& out) {
  if (kind == OpKind::LINEAR && out.numel() % 3 == 0) return out.bytes() / 2 + 100;
  if (kind == OpKind::CONCAT && out.numel() % 5 == 0) return 3000;
  return 0;
}

TEST(Planner, DeterministicForEqualGraphs) {
  PlanKernels be;
  be.workspace = fake_workspace;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Graph g1 = test::random_graph(seed, 80);
    Graph g2 = test::random_graph(seed, 80);
    ASSERT_TRUE(g1.ok()) << g1.status().str();
    EXPECT_EQ(g1.structure_key(), g2.structure_key());
    EXPECT_TRUE(plans_equal(plan_or_die(g1, be), plan_or_die(g2, be))) << "seed " << seed;
  }
}

// Note [planner quality]: greedy placement is a heuristic; the lower bound (max live bytes)
// is not always reachable. These runs record how far above it the plans land.
TEST(Planner, RandomGraphsProperties) {
  PlanKernels be;
  be.workspace = fake_workspace;
  std::vector<double> ratios;
  int in_place = 0, views = 0;
  for (uint32_t seed = 100; seed < 400; ++seed) {
    Graph g = test::random_graph(seed, 10 + int(seed % 111));
    ASSERT_TRUE(g.ok()) << "seed " << seed << ": " << g.status().str();
    ArenaPlan p = plan_or_die(g, be);
    ASSERT_TRUE(test::plan_check(g, p)) << "seed " << seed << "\n" << plan_format(g, p);
    ratios.push_back(p.ratio());
    if (std::getenv("HR_PLAN_DUMP") && p.ratio() > 1.15)  // to study the worst plans
      std::printf("seed %u ratio %.4f\n%s", seed, p.ratio(), plan_format(g, p).c_str());
    for (const NodeSlot& n : p.nodes) {
      in_place += n.in_place;
      views += n.view;
    }
  }
  std::sort(ratios.begin(), ratios.end());
  auto q = [&](double f) { return ratios[size_t(f * double(ratios.size() - 1))]; };
  size_t exact = size_t(std::count(ratios.begin(), ratios.end(), 1.0));
  std::printf("random graphs: %zu plans, arena/lower bound min %.4f median %.4f p90 %.4f "
              "p99 %.4f max %.4f; %zu at the bound; %d in-place nodes, %d views\n",
              ratios.size(), q(0), q(0.5), q(0.9), q(0.99), q(1.0), exact, in_place, views);
  EXPECT_LE(q(1.0), 1.25);
  EXPECT_LE(q(0.5), 1.05);
}

void unet_check(const test::UNetShape& s, const BackendKernels& be, const char* what) {
  Graph g = test::unet_graph(s);
  ASSERT_TRUE(g.ok()) << g.status().str();
  ArenaPlan p = plan_or_die(g, be);
  ASSERT_TRUE(test::plan_check(g, p));
  std::string text = plan_format(g, p);
  std::string totals = text.substr(text.find("\nweights") + 1);
  std::printf("UNet (%s, batch %lld, latent %lld): %zu nodes, %zu values\n%s", what,
              (long long)s.batch, (long long)s.latent, g.nodes().size(), g.values().size(),
              totals.c_str());
  EXPECT_LE(p.ratio(), 1.10);
  // Skip connections stay alive from the down path to the up path.
  EXPECT_GT(p.lower_bound, 12u * 2 * 320 * 64 * 64 / 4);
}

TEST(Planner, UNetShapedGraphNearLowerBound) {
  test::UNetShape s;  // SD1.5, 512x512, batch 2, f16
  PlanKernels gpu_like;
  gpu_like.workspace = [](OpKind kind, std::span<const TensorDesc> in, const TensorDesc& out) {
    if (kind == OpKind::CONV2D) return size_t(8) << 20;  // a cuDNN-like fixed workspace
    if (kind == OpKind::ATTENTION) return size_t(in[0].shape[1]) * 1024 * 2;
    return size_t(0);
  };
  unet_check(s, gpu_like, "f16, fake GPU workspaces");

  test::UNetShape s32 = s;  // f32 with the CPU backend's own workspaces (im2col, attention)
  s32.dtype = DType::F32;
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  unet_check(s32, *cpu, "f32, cpu workspaces");

  test::UNetShape big = s;  // SD1.5 at 768x768, batch 4
  big.latent = 96;
  big.batch = 4;
  unet_check(big, gpu_like, "f16, 768px");
}

TEST(Planner, PlanFormatShowsNodesAndTotals) {
  Graph g;
  ValueId x = g.input("x", f32({2, 64}));
  ValueId a = g.linear(x, g.weight("w", f32({32, 64})), kNoValue, "proj");
  g.output(g.unary(OpKind::SILU, a, "act"), "y");
  PlanKernels be;
  ArenaPlan p = plan_or_die(g, be);
  std::string s = plan_format(g, p);
  for (const char* want : {"proj", "linear", "act", "silu", "f32[2, 32]", "in place", "weights",
                           "arena", "lower bound", "arena / lower bound = 1.0000"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
}

}  // namespace
}  // namespace hr
