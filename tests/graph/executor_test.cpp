// Executor on the CPU backend: bit-exact against op-by-op runs, binding errors, arena reuse,
// plan cache, budget errors.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "graph_test_util.h"
#include "memory/executor_policies.h"
#include "synthetic_unet.h"

namespace hr {
namespace {

TensorDesc f32(std::initializer_list<int64_t> d) { return TensorDesc{DType::F32, Shape(d)}; }

::testing::AssertionResult bit_equal(const HostTensor& a, const HostTensor& b) {
  if (a.desc() != b.desc())
    return ::testing::AssertionFailure() << a.desc().str() << " vs " << b.desc().str();
  if (a.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) != 0)
    return ::testing::AssertionFailure() << "contents differ (" << a.desc().str() << ")";
  return ::testing::AssertionSuccess();
}

class ExecutorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu_ = cpu_backend_create(1);
  Allocator alloc_{*cpu_};
  Executor ex_{*cpu_, alloc_, executor_policies_default(*cpu_)};
};

// linear -> gelu -> linear -> residual add, reshape views of an intermediate and of an
// input, a concat of the two views; the residual, a view and the concat are outputs.
Graph small_graph() {
  Graph g;
  ValueId x = g.input("x", f32({2, 8, 16}));
  ValueId h = g.linear(x, g.weight("w1", f32({32, 16})), g.weight("b1", f32({32})), "fc1");
  h = g.unary(OpKind::GELU, h, "act");
  h = g.linear(h, g.weight("w2", f32({16, 32})), g.weight("b2", f32({16})), "fc2");
  ValueId r = g.add(h, x, "residual");
  ValueId v = g.reshape(r, Shape{16, 16}, "flat");
  ValueId xv = g.reshape(x, Shape{16, 16}, "x_flat");
  ValueId c = g.concat({v, xv}, 0, "cat");
  g.output(c, "cat");
  g.output(r, "residual");
  g.output(v, "flat");
  return g;
}

TEST_F(ExecutorTest, SmallGraphMatchesOpByOpBitExactly) {
  Graph g = small_graph();
  ASSERT_TRUE(g.ok()) << g.status().str();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 7, inputs, weights);
  std::vector<HostTensor> want = test::reference_run(g, *cpu_, inputs, weights);
  weights.asked.clear();
  Result<std::vector<HostTensor>> got = ex_.run(g, test::host_inputs(inputs), weights);
  ASSERT_TRUE(got.ok()) << got.status().str();
  ASSERT_EQ(got->size(), 3u);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bit_equal((*got)[i], want[i])) << i;
  EXPECT_EQ((*got)[0].shape(), (Shape{32, 16}));
  // Weights are asked for in execution order, once each.
  EXPECT_EQ(weights.asked, (std::vector<std::string>{"w1", "b1", "w2", "b2"}));
}

TEST_F(ExecutorTest, RandomGraphsMatchOpByOpBitExactly) {
  for (uint32_t seed = 1000; seed < 1040; ++seed) {
    Graph g = test::random_graph(seed, 10 + int(seed % 50));
    ASSERT_TRUE(g.ok()) << g.status().str();
    std::map<std::string, HostTensor> inputs;
    test::MapWeights weights;
    test::bindings_fill(g, seed, inputs, weights);
    std::vector<HostTensor> want = test::reference_run(g, *cpu_, inputs, weights);
    Result<std::vector<HostTensor>> got = ex_.run(g, test::host_inputs(inputs), weights);
    ASSERT_TRUE(got.ok()) << "seed " << seed << ": " << got.status().str();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(bit_equal((*got)[i], want[i])) << "seed " << seed << " output " << i;
  }
}

// The UNet-shaped planning graph at toy size: conv, group norm, attention, permute,
// upsample, skip concats and views all run through the arena.
TEST_F(ExecutorTest, TinyUNetMatchesOpByOpBitExactly) {
  test::UNetShape s;
  s.batch = 2;
  s.latent = 8;
  s.context_len = 7;
  s.context_dim = 32;
  s.model_ch = 32;
  s.mult = {1, 2};
  s.attn = {true, false};
  s.heads = 2;
  s.dtype = DType::F32;
  Graph g = test::unet_graph(s);
  ASSERT_TRUE(g.ok()) << g.status().str();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 11, inputs, weights);
  for (auto& [name, w] : weights.tensors)  // keep activations in a sane range
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] *= 0.1f;
  std::vector<HostTensor> want = test::reference_run(g, *cpu_, inputs, weights);
  Result<std::vector<HostTensor>> got = ex_.run(g, test::host_inputs(inputs), weights);
  ASSERT_TRUE(got.ok()) << got.status().str();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].shape(), (Shape{2, 4, 8, 8}));
  EXPECT_TRUE(bit_equal((*got)[0], want[0]));
}

TEST_F(ExecutorTest, InPlaceChainAndPassthroughOutputs) {
  Graph g;
  ValueId x = g.input("x", f32({3, 50}));
  ValueId h = g.unary(OpKind::SILU, x);
  h = g.scale(h, 3.0f, 1.0f);
  h = g.add(h, g.weight("bias", f32({50})));
  g.output(h, "y");
  Graph g2;  // an input and a weight marked as outputs, untouched by any node
  ValueId x2 = g2.input("x", f32({3, 50}));
  ValueId w2 = g2.weight("bias", f32({50}));
  g2.output(x2, "x");
  g2.output(w2, "bias");
  g2.output(g2.unary(OpKind::SILU, x2), "s");
  for (Graph* gp : {&g, &g2}) {
    std::map<std::string, HostTensor> inputs;
    test::MapWeights weights;
    test::bindings_fill(*gp, 3, inputs, weights);
    std::vector<HostTensor> want = test::reference_run(*gp, *cpu_, inputs, weights);
    Result<std::vector<HostTensor>> got = ex_.run(*gp, test::host_inputs(inputs), weights);
    ASSERT_TRUE(got.ok()) << got.status().str();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bit_equal((*got)[i], want[i])) << i;
  }
  Result<std::shared_ptr<const ArenaPlan>> p = ex_.plan(g);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->arena_bytes, 768u);  // one slot for the whole chain
}

TEST_F(ExecutorTest, MissingOrWrongInputsNameTheInput) {
  Graph g = small_graph();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 1, inputs, weights);

  Result<std::vector<HostTensor>> r = ex_.run(g, {}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("'x'"), std::string::npos) << r.status().str();

  HostTensor wrong(f32({2, 8, 15}));
  r = ex_.run(g, {{"x", &wrong}}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("'x'"), std::string::npos) << r.status().str();
  EXPECT_NE(r.status().message().find("f32[2, 8, 15]"), std::string::npos) << r.status().str();

  r = ex_.run(g, {{"x", &inputs.at("x")}, {"latent", &inputs.at("x")}}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'latent'"), std::string::npos) << r.status().str();

  r = ex_.run(g, {{"x", nullptr}}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
}

TEST_F(ExecutorTest, MissingWeightNamesTheNode) {
  Graph g = small_graph();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 1, inputs, weights);
  weights.tensors.erase("w2");
  Result<std::vector<HostTensor>> r = ex_.run(g, test::host_inputs(inputs), weights);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::NOT_FOUND);
  const std::string& m = r.status().message();
  // The fusion pass joined fc2 and the residual add (graph/passes.h); the error names both.
  for (const char* want : {"node 2", "'fc2+residual'", "linear", "f32[2, 8, 32]", "w2"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " in: " << m;

  // A weight served with another shape is refused, naming it.
  weights.tensors["w2"] = HostTensor(f32({16, 31}));
  r = ex_.run(g, test::host_inputs(inputs), weights);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'w2'"), std::string::npos) << r.status().str();
}

TEST_F(ExecutorTest, BuildErrorAndKernelErrorAreReported) {
  Graph bad;
  ValueId x = bad.input("x", f32({2, 4}));
  bad.output(bad.linear(x, bad.weight("w", f32({3, 5})), kNoValue, "broken"), "y");
  test::MapWeights weights;
  Result<std::vector<HostTensor>> r = ex_.run(bad, {}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("broken"), std::string::npos) << r.status().str();

  // The CPU backend computes in f32 only: an f16 silu fails inside the kernel.
  Graph h;
  ValueId xh = h.input("x", TensorDesc{DType::F16, Shape{4}});
  h.output(h.unary(OpKind::SILU, xh, "act"), "y");
  HostTensor in(TensorDesc{DType::F16, Shape{4}});
  r = ex_.run(h, {{"x", &in}}, weights);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node 0 'act' (silu)"), std::string::npos)
      << r.status().str();
  EXPECT_NE(r.status().message().find("f16[4]"), std::string::npos) << r.status().str();
}

TEST_F(ExecutorTest, ArenaIsKeptBetweenRunsAndPlansAreCached) {
  Graph g1 = small_graph();
  Graph g2 = small_graph();  // built separately, same structure
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g1, 5, inputs, weights);

  Result<std::shared_ptr<const ArenaPlan>> p1 = ex_.plan(g1);
  Result<std::shared_ptr<const ArenaPlan>> p2 = ex_.plan(g2);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(p1->get(), p2->get());
  EXPECT_EQ(ex_.plans_computed(), 1u);
  EXPECT_EQ(ex_.plans_cached(), 1u);

  ASSERT_TRUE(ex_.run(g1, test::host_inputs(inputs), weights).ok());
  Result<std::vector<HostTensor>> a = ex_.run(g2, test::host_inputs(inputs), weights);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(alloc_.stats(Pool::ACTIVATIONS).allocations, 1u);
  EXPECT_EQ(ex_.plans_computed(), 1u);
  EXPECT_GE(ex_.arena_held(), (*p1)->arena_bytes);
  EXPECT_EQ(alloc_.stats(Pool::ACTIVATIONS).current, ex_.arena_held());

  // A smaller graph fits the arena held: still one allocation.
  Graph small;
  small.output(small.unary(OpKind::SILU, small.input("x", f32({2, 8, 16}))), "y");
  ASSERT_TRUE(ex_.run(small, test::host_inputs(inputs), weights).ok());
  EXPECT_EQ(alloc_.stats(Pool::ACTIVATIONS).allocations, 1u);

  ex_.release_arena();
  EXPECT_EQ(ex_.arena_held(), 0u);
  EXPECT_EQ(alloc_.stats(Pool::ACTIVATIONS).current, 0u);
  Result<std::vector<HostTensor>> b = ex_.run(g1, test::host_inputs(inputs), weights);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(alloc_.stats(Pool::ACTIVATIONS).allocations, 2u);
  for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE(bit_equal((*a)[i], (*b)[i]));
}

TEST_F(ExecutorTest, ArenaOverBudgetIsAnOutOfMemoryStatus) {
  Allocator tight(*cpu_, 1024);
  Executor ex(*cpu_, tight, executor_policies_default(*cpu_));
  Graph g = small_graph();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 5, inputs, weights);
  Result<std::vector<HostTensor>> r = ex.run(g, test::host_inputs(inputs), weights);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(r.status().message().find("graph arena"), std::string::npos) << r.status().str();
  EXPECT_TRUE(r.status().segments().has_value());
}

}  // namespace
}  // namespace hr
