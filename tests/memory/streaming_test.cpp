// Streamed execution (Note [streamed execution] in graph/stream_copies.cpp): a graph whose
// weights do not fit the budget streams them through a staging ring and gives the resident run's
// results bit for bit, with copies that complete early or late (tests/async_sim_backend.h).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "async_sim_backend.h"
#include "graph/executor.h"
#include "graph/graph_test_util.h"
#include "graph/planner.h"
#include "graph/residency.h"
#include "memory/executor_policies.h"
#include "memory/residency_planner.h"

namespace hr {
namespace {

bool bit_equal(const HostTensor& a, const HostTensor& b) {
  return a.desc() == b.desc() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// A residual MLP: `layers` linear layers of width x width (weights 64 KiB at width 128), each
// read once, plus a layer whose weight two nodes read far apart (its ring bytes must stay put).
Graph mlp(int layers, int64_t width) {
  Graph g;
  ValueId x = g.input("x", TensorDesc{DType::F32, Shape{4, width}});
  ValueId shared = g.weight("shared.weight", TensorDesc{DType::F32, Shape{width, width}});
  ValueId h = g.linear(x, shared);
  for (int i = 0; i < layers; ++i) {
    ValueId w = g.weight(fmt::format("l{}.weight", i), TensorDesc{DType::F32, Shape{width, width}});
    ValueId b = g.weight(fmt::format("l{}.bias", i), TensorDesc{DType::F32, Shape{width}});
    h = g.add(h, g.unary(OpKind::SILU, g.linear(h, w, b)));
  }
  h = g.linear(h, shared);
  g.output(h, "y");
  return g;
}

struct Bound {
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
};

// Output of g on `backend` within `budget` (allocator level; the weights are not counted by
// MapWeights, so the budget is the arena plus the room left for weights and the ring).
std::vector<HostTensor> run_with(Backend& backend, const Graph& g, Bound& b, uint64_t budget,
                                 ResidencyPlan* res = nullptr, int runs = 1) {
  Allocator alloc(backend, budget);
  Executor ex(backend, alloc, executor_policies_default(backend));
  ResidencyOptions o;
  o.depth = 2;
  o.small_bytes = 0;
  ex.set_residency_options(o);
  std::vector<HostTensor> out;
  for (int i = 0; i < runs; ++i) {
    Result<std::vector<HostTensor>> r = ex.run(g, test::host_inputs(b.inputs), b.weights);
    EXPECT_TRUE(r.ok()) << r.status().str();
    if (!r.ok()) return {};
    out = std::move(r).value();
  }
  EXPECT_LE(alloc.total().peak, budget);
  if (res) *res = ex.last_residency();
  return out;
}

class StreamingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = cpu_backend_create(1);
    g_ = mlp(12, 128);
    test::bindings_fill(g_, 7, b_.inputs, b_.weights);
    Allocator a(*cpu_);
    Executor ex(*cpu_, a, executor_policies_default(*cpu_));
    auto c = ex.compile(g_);
    ASSERT_TRUE(c.ok());
    arena_ = (*c)->plan->arena_bytes;
    weights_ = (*c)->weight_bytes;
    ResidencyOptions o;
    o.depth = 2;
    o.small_bytes = 0;
    min_room_ = residency_min_room((*c)->weights, o);
    want_ = run_with(*cpu_, g_, b_, Allocator::kUnlimited);
  }
  std::unique_ptr<Backend> cpu_;
  Graph g_;
  Bound b_;
  uint64_t arena_ = 0, weights_ = 0, min_room_ = 0;
  std::vector<HostTensor> want_;
};

TEST_F(StreamingTest, PlanKeepsWhatFitsAndStreamsTheRest) {
  Allocator a(*cpu_);
  Executor ex(*cpu_, a, executor_policies_default(*cpu_));
  auto c = ex.compile(g_);
  ASSERT_TRUE(c.ok());
  const std::vector<WeightUse>& uses = (*c)->weights;
  ASSERT_EQ(uses.size(), 25u);  // shared + 12 x (weight, bias)
  EXPECT_EQ(uses[0].first, 0);
  EXPECT_EQ(size_t(uses[0].last), (*c)->graph.nodes().size() - 1) << "shared is read last too";
  auto all = residency_plan(uses, weights_);
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->streams());
  ResidencyOptions o;
  o.depth = 2;
  o.small_bytes = 4096;  // the biases stay resident
  auto p = residency_plan(uses, weights_ / 2, o);
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_TRUE(p->streams());
  EXPECT_LE(p->device_bytes(), weights_ / 2);
  EXPECT_EQ(p->resident_bytes + p->streamed_bytes, weights_);
  EXPECT_EQ(p->largest_streamed, 128u * 128 * 4);
  EXPECT_GE(p->ring_bytes, 2 * p->largest_streamed);
  for (size_t k = 0; k < uses.size(); ++k) {
    if (uses[k].bytes < 4096) {
      EXPECT_FALSE(p->streamed(k)) << "small weights stay resident";
    }
    if (!p->streamed(k)) continue;
    EXPECT_LE(uint64_t(p->offset[k]) + uses[k].bytes, p->ring_bytes);
    EXPECT_LT(p->copy_after[k], uses[k].first) << "a copy never waits for its own reader";
    // Every earlier streamed weight whose bytes it overwrites was last read by copy_after.
    for (size_t j = 0; j < k; ++j)
      if (p->streamed(j) && p->offset[j] < p->offset[k] + int64_t(uses[k].bytes) &&
          p->offset[k] < p->offset[j] + int64_t(uses[j].bytes)) {
        EXPECT_LE(uses[j].last, std::max(p->copy_after[k], uses[j].last)) << j << " " << k;
      }
  }
  std::printf("  %s\n", residency_describe(*p, uses).c_str());
  auto none = residency_plan(uses, residency_min_room(uses, o) - 1, o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(none.status().message().find("staging ring"), std::string::npos);
}

TEST_F(StreamingTest, StreamedRunsEqualTheResidentRunBitwise) {
  for (uint64_t room : {weights_ * 3 / 4, weights_ / 3, min_room_}) {
    ResidencyPlan res;
    std::vector<HostTensor> got = run_with(*cpu_, g_, b_, arena_ + room, &res, 3);
    ASSERT_EQ(got.size(), want_.size());
    EXPECT_TRUE(res.streams()) << room;
    EXPECT_LE(res.device_bytes(), room);
    EXPECT_TRUE(bit_equal(got[0], want_[0])) << "room " << room;
  }
}

// Copies that run as early or as late as the events allow, and random interleavings: any
// missing wait (slot still read, copy not done) changes the result.
TEST_F(StreamingTest, AsyncCopiesEarlyOrLateGiveTheSameResult) {
  std::vector<std::pair<SimOrder, uint64_t>> orders = {
      {SimOrder::COPIES_EARLY, 1}, {SimOrder::COPIES_LATE, 1}, {SimOrder::ROUND_ROBIN, 1}};
  for (uint64_t seed = 1; seed <= 6; ++seed) orders.push_back({SimOrder::RANDOM, seed});
  for (auto [order, seed] : orders) {
    AsyncSimBackend sim(order, seed);
    sim.set_discrete(true);
    ResidencyPlan res;
    std::vector<HostTensor> got = run_with(sim, g_, b_, arena_ + weights_ / 3, &res, 2);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(res.streams());
    EXPECT_GT(sim.copies(), 2 * res.streamed_count) << "every streamed weight copied per run";
    EXPECT_TRUE(bit_equal(got[0], want_[0])) << "order " << int(order) << " seed " << seed;
  }
}

// Note [coalesced copies]: with host copies laid out like the ring, neighbouring streamed weights
// go as one transfer; with any interleaving of copies and compute the result stays the
// resident run's, for groups of any size.
TEST_F(StreamingTest, CoalescedCopiesGiveTheSameResultWithFewerTransfers) {
  b_.weights.contiguous = true;
  const uint64_t layer = 128 * 128 * 4;
  std::map<uint64_t, uint64_t> transfers;  // group bytes -> transfers of the second run
  for (uint64_t group : {uint64_t(1), 2 * layer, uint64_t(8) << 20}) {
    for (auto [order, seed] : std::vector<std::pair<SimOrder, uint64_t>>{
             {SimOrder::COPIES_EARLY, 1}, {SimOrder::COPIES_LATE, 1}, {SimOrder::RANDOM, 3},
             {SimOrder::RANDOM, 4}}) {
      AsyncSimBackend sim(order, seed);
      sim.set_discrete(true);
      Allocator alloc(sim, arena_ + weights_ * 2 / 3);
      Executor ex(sim, alloc, executor_policies_default(sim));
      ResidencyOptions o;
      o.depth = 6;  // a ring of six layers: copies start several at a time
      o.small_bytes = 0;
      o.group_bytes = group;
      ex.set_residency_options(o);
      Result<std::vector<HostTensor>> r = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
      ASSERT_TRUE(r.ok()) << r.status().str();
      const uint64_t before = sim.copies();
      r = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
      ASSERT_TRUE(r.ok()) << r.status().str();
      ASSERT_GT(ex.last_residency().streamed_count, 4u);
      if (group == 1) {
        EXPECT_GE(sim.copies() - before, ex.last_residency().streamed_count)
            << "groups of one byte: a transfer per weight";
      }
      transfers[group] = sim.copies() - before;  // streamed weights + the input and the output
      EXPECT_TRUE(bit_equal((*r)[0], want_[0])) << "group " << group << " order " << int(order);
    }
    std::printf("  groups of up to %llu bytes: %llu transfers per run\n",
                (unsigned long long)group, (unsigned long long)transfers[group]);
  }
  EXPECT_LT(transfers[2 * layer], transfers[1]) << "pairs of layers go together";
  EXPECT_LT(transfers[8 << 20], transfers[2 * layer]) << "runs of layers go together";
}

// Note [streaming timeline]: a timed streamed run says when each copy group ended; every group
// ended after the node its copy waited for and before its first reader ended, and the groups
// carry every streamed byte.
TEST_F(StreamingTest, TimedRunRecordsTheCopyTimeline) {
  Allocator alloc(*cpu_, arena_ + weights_ / 3);
  Executor ex(*cpu_, alloc, executor_policies_default(*cpu_));
  ResidencyOptions o;
  o.depth = 2;
  o.small_bytes = 0;
  ex.set_residency_options(o);
  ex.set_node_timing(true);
  auto r = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_TRUE(bit_equal((*r)[0], want_[0]));
  const Executor::StreamTimeline& t = ex.last_timeline();
  ASSERT_TRUE(ex.last_residency().streams());
  ASSERT_EQ(t.node_end_ms.size(), ex.node_ms().size());
  ASSERT_FALSE(t.groups.empty());
  uint64_t bytes = 0;
  for (const Executor::StreamTimeline::Group& gr : t.groups) {
    bytes += gr.bytes;
    ASSERT_GE(gr.first, 0);
    EXPECT_LE(gr.end_ms, t.node_end_ms[size_t(gr.first)]) << "a reader waits for its copy";
    if (gr.after >= 0) {
      EXPECT_GE(gr.end_ms, t.node_end_ms[size_t(gr.after)]) << "a copy waits for its node";
    }
  }
  EXPECT_EQ(bytes, ex.last_residency().streamed_bytes);
  ex.set_node_timing(false);
  ASSERT_TRUE(ex.run(g_, test::host_inputs(b_.inputs), b_.weights).ok());
}

// Note [residency cache]: a graph run again in the same room reuses its residency plan; another
// room (a lowered budget) or new options make a new one, and every run gives the same bits.
TEST_F(StreamingTest, ResidencyPlanIsMadeOncePerRoom) {
  Allocator alloc(*cpu_, arena_ + weights_ / 2);
  Executor ex(*cpu_, alloc, executor_policies_default(*cpu_));
  ResidencyOptions o;
  o.depth = 2;
  o.small_bytes = 0;
  ex.set_residency_options(o);
  for (int i = 0; i < 3; ++i) {
    auto r = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
    ASSERT_TRUE(r.ok()) << r.status().str();
    EXPECT_TRUE(bit_equal((*r)[0], want_[0]));
  }
  ASSERT_TRUE(ex.last_residency().streams());
  EXPECT_EQ(ex.residency_plans_made(), 1u);
  alloc.set_budget(arena_ + weights_ / 3);
  auto lower = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
  ASSERT_TRUE(lower.ok()) << lower.status().str();
  EXPECT_TRUE(bit_equal((*lower)[0], want_[0]));
  EXPECT_EQ(ex.residency_plans_made(), 2u);
  const uint64_t streamed_lower = ex.last_residency().streamed_bytes;
  alloc.set_budget(arena_ + weights_ / 2);  // back: the first plan again, from the cache
  ASSERT_TRUE(ex.run(g_, test::host_inputs(b_.inputs), b_.weights).ok());
  EXPECT_EQ(ex.residency_plans_made(), 2u);
  EXPECT_LT(ex.last_residency().streamed_bytes, streamed_lower);
  ex.set_residency_options(o);  // new options: planned again
  ASSERT_TRUE(ex.run(g_, test::host_inputs(b_.inputs), b_.weights).ok());
  EXPECT_EQ(ex.residency_plans_made(), 3u);
}

// The budget lowered between two runs of the same executor: the second run streams.
TEST_F(StreamingTest, LoweredBudgetBetweenRunsStreams) {
  Allocator alloc(*cpu_);
  Executor ex(*cpu_, alloc, executor_policies_default(*cpu_));
  auto r1 = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
  ASSERT_TRUE(r1.ok());
  EXPECT_FALSE(ex.last_residency().streams());
  alloc.set_budget(arena_ + weights_ / 2);
  alloc.reset_peak();
  auto r2 = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
  ASSERT_TRUE(r2.ok()) << r2.status().str();
  EXPECT_TRUE(ex.last_residency().streams()) << ex.last_residency_text();
  EXPECT_LE(alloc.total().peak, arena_ + weights_ / 2);
  EXPECT_TRUE(bit_equal((*r2)[0], want_[0]));
  EXPECT_GT(ex.streamed_total(), 0u);
  alloc.set_budget(arena_ + min_room_ - 1);
  auto r3 = ex.run(g_, test::host_inputs(b_.inputs), b_.weights);
  ASSERT_FALSE(r3.ok());
  EXPECT_EQ(r3.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(r3.status().message().find("within a"), std::string::npos) << r3.status().str();
}

}  // namespace
}  // namespace hr
