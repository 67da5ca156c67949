// Stacked fp8 projections (Note [stacked fp8 projections] in graph/pass_stack.cpp): which
// projections of fp8 weights stack, in which form, and that the outputs are bit-identical to the
// unstacked graph's on the CPU, for dequantized weights and for `_fast` fp8 GEMMs (its stacked GEMM).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/fp8_round.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "graph_test_util.h"
#include "memory/executor_policies.h"

namespace hr {
namespace {

// Cross-attentions a1..a3 (heads 2, head dims 8, 16, 8) whose K and V project the INPUT
// "context" [2, 5, 48] and whose queries project x [2, 10, 32]; a3's to_v is scaled fp8 (not
// stacked: one scale per part); a4's K and V read one weight (dequantized, its CAST has two
// readers: not stacked); a self-attention "s" of x; and "big" [512, 32], the largest weight, which sets the
// caps (stored in `act` instead when !big_fp8). Every projection weight is stored as unscaled e4m3 unless said otherwise; `fast` marks
// them `_fast` (Note [fp8 linear]).
Graph fp8_attention_graph(DType act, bool fast, bool big_fp8 = true) {
  auto map = std::make_shared<WeightStorageMap>();
  Graph g;
  auto w = [&](const std::string& n, Shape s, const std::string& scale = "") {
    (*map)[n] = WeightStorage{DType::F8_E4M3, scale, fast};
    return g.weight(n, TensorDesc{act, s});
  };
  g.set_weight_storage(map);
  const ValueId x = g.input("x", TensorDesc{act, Shape{2, 10, 32}});
  const ValueId ctx = g.input("context", TensorDesc{act, Shape{2, 5, 48}});
  const int64_t dims[] = {8, 16, 8};
  for (int i = 0; i < 3; ++i) {
    const std::string a = fmt::format("a{}", i + 1);
    const int64_t hd = 2 * dims[i];
    const ValueId q = g.linear(x, w(a + ".to_q", {hd, 32}), kNoValue, a + ".to_q");
    const ValueId k = g.linear(ctx, w(a + ".to_k", {hd, 48}), kNoValue, a + ".to_k");
    const ValueId v = g.linear(ctx, w(a + ".to_v", {hd, 48}, i == 2 ? a + ".scale" : ""),
                               kNoValue, a + ".to_v");
    g.output(g.attention(q, k, v, 2, false, a + ".attn"), a);
  }
  {
    const ValueId q = g.linear(x, w("a4.to_q", {16, 32}), kNoValue, "a4.to_q");
    const ValueId kv = w("a4.to_kv", {16, 48});
    const ValueId k = g.linear(ctx, kv, kNoValue, "a4.to_k");
    const ValueId v = g.linear(ctx, kv, kNoValue, "a4.to_v");
    g.output(g.attention(q, k, v, 2, false, "a4.attn"), "a4");
  }
  {
    const ValueId q = g.linear(x, w("s.to_q", {32, 32}), kNoValue, "s.to_q");
    const ValueId k = g.linear(x, w("s.to_k", {32, 32}), kNoValue, "s.to_k");
    const ValueId v = g.linear(x, w("s.to_v", {32, 32}), kNoValue, "s.to_v");
    g.output(g.attention(q, k, v, 2, false, "s.attn"), "s");
  }
  const ValueId big = big_fp8 ? w("big", {512, 32}) : g.weight("big", TensorDesc{act, Shape{512, 32}});
  g.output(g.linear(x, big, kNoValue, "big"), "big");
  return g;
}

// Inputs in `act` and weights as stored: e4m3 codes of normal values, f32 scales.
void fp8_bindings(const Graph& g, uint32_t seed, std::map<std::string, HostTensor>& inputs,
                  test::MapWeights& weights) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](const TensorDesc& d) {
    HostTensor f(TensorDesc{DType::F32, d.shape});
    for (int64_t i = 0; i < f.numel(); ++i) f.f32()[i] = nd(rng) * 0.5f;
    if (d.dtype == DType::F32) return f;
    HostTensor t(d);
    if (dtype_is_fp8(d.dtype)) {
      f32_to_f8(f.f32(), d.dtype, static_cast<uint8_t*>(t.data()), t.numel());
      return t;
    }
    return f.to(d.dtype);
  };
  for (const Value& v : g.values()) {
    if (v.kind == ValueKind::INPUT) inputs[v.name] = fill(v.desc);
    if (v.kind != ValueKind::WEIGHT) continue;
    weights.tensors[v.name] = fill(v.desc);
    if (v.desc.shape == Shape{1}) weights.tensors[v.name].f32()[0] = 0.75f;  // a scale
  }
}

std::map<OpKind, int> kinds(const Graph& g) {
  std::map<OpKind, int> m;
  for (const Node& n : g.nodes()) ++m[n.kind];
  return m;
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (n.name == name) return &n;
  return nullptr;
}

// The node reading stacked weight `name`, and the node reading that node's output.
struct StackUse {
  const Node* first = nullptr;
  const Node* second = nullptr;
};
StackUse stack_use(const Graph& g, const std::string& name) {
  const ValueId w = g.find_weight(name, WeightLayout::STACK);
  StackUse u;
  if (w == kNoValue) return u;
  for (const Node& n : g.nodes())
    for (ValueId in : n.inputs) {
      if (in == w) u.first = &n;
      if (u.first && in == u.first->output) u.second = &n;
    }
  return u;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.desc() == b.desc() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

class PassStackFp8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = cpu_backend_create(2);
    alloc_ = std::make_unique<Allocator>(*backend_);
  }
  std::vector<HostTensor> run(const Graph& g, const PassOptions& o,
                              const std::map<std::string, HostTensor>& inputs,
                              WeightSource& weights) {
    Executor ex(*backend_, *alloc_, executor_policies_default(*backend_));
    ex.set_passes(true);
    ex.set_pass_options(o);
    auto out = ex.run(g, test::host_inputs(inputs), weights);
    EXPECT_TRUE(out.ok()) << out.status().str();
    return out.ok() ? std::move(out).value() : std::vector<HostTensor>{};
  }
  // The outputs with and without stacking after the options `base`: bit-identical.
  void expect_same_outputs(const Graph& g, PassOptions base) {
    std::map<std::string, HostTensor> inputs;
    test::MapWeights map;
    fp8_bindings(g, 7, inputs, map);
    test::StackingWeights weights(map);
    PassOptions stacked = base;
    stacked.stack = stacked.stack_qkv = true;
    const std::vector<HostTensor> ref = run(g, base, inputs, weights);
    ASSERT_TRUE(weights.served.empty());
    const std::vector<HostTensor> got = run(g, stacked, inputs, weights);
    EXPECT_EQ(weights.served.size(), 2u) << "the context stack and the self-attention's";
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_TRUE(same_bytes(got[i], ref[i])) << g.value(g.outputs()[i]).name;
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
};

TEST_F(PassStackFp8Test, DequantizedFp8ProjectionsStackAsOneFp8WeightAndOneCast) {
  const Graph g = fp8_attention_graph(DType::F32, false);
  ASSERT_TRUE(g.ok()) << g.status().str();
  Result<Graph> r = pass_stack_projections(g, true);
  ASSERT_TRUE(r.ok()) << r.status().str();
  // a1 and a2's K and V: one e4m3 weight, one CAST to f32, one LINEAR of the context.
  const std::string kv = "a1.to_k+a1.to_v+a2.to_k+a2.to_v";
  const ValueId w = r->find_weight(kv, WeightLayout::STACK);
  ASSERT_NE(w, kNoValue);
  EXPECT_EQ(r->desc(w), (TensorDesc{DType::F8_E4M3, Shape{16 + 16 + 32 + 32, 48}}));
  const StackUse u = stack_use(*r, kv);
  ASSERT_NE(u.first, nullptr);
  ASSERT_NE(u.second, nullptr);
  EXPECT_EQ(u.first->kind, OpKind::CAST);
  EXPECT_EQ(u.first->inputs.size(), 1u);
  EXPECT_EQ(r->desc(u.first->output).dtype, DType::F32);
  EXPECT_EQ(u.second->kind, OpKind::LINEAR);
  EXPECT_EQ(u.second->inputs[0], r->find_input("context"));
  for (const char* gone : {"a1.to_k", "a2.to_v", "a1.to_k.dequant"}) {
    EXPECT_EQ(node_named(*r, gone), nullptr) << gone;
  }
  // The self-attention's Q, K and V: one weight of three parts.
  const StackUse s = stack_use(*r, "s.to_q+s.to_k+s.to_v");
  ASSERT_NE(s.first, nullptr);
  EXPECT_EQ(s.first->kind, OpKind::CAST);
  EXPECT_TRUE(node_named(*r, "s.attn")->params.kv_window);
  // Left as built: a3 (a scaled part), a4 (one CAST read twice).
  for (const char* plain : {"a3.to_k", "a3.to_v", "a4.to_k", "a4.to_v"}) {
    EXPECT_NE(node_named(*r, plain), nullptr) << plain;
  }
  EXPECT_FALSE(node_named(*r, "a3.attn")->params.kv_window);
  EXPECT_FALSE(node_named(*r, "a4.attn")->params.kv_window);
  // 16 LINEARs became 16 - 4 + 1 - 3 + 1; the CASTs of the stacked parts became two.
  EXPECT_EQ(kinds(g)[OpKind::LINEAR], 16);
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], 11);
  EXPECT_EQ(kinds(*r)[OpKind::CAST], kinds(g)[OpKind::CAST] - 7 + 2);
  // Nothing is left to stack.
  Result<Graph> again = pass_stack_projections(*r, true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->structure_key(), r->structure_key());
}

TEST_F(PassStackFp8Test, DequantizedStacksComputeTheSameBits) {
  expect_same_outputs(fp8_attention_graph(DType::F32, false), PassOptions{false, false});
}

// A context stack's dequantized copy stays within the graph's largest dequantized copy: with
// "big" stored in f32 (not dequantized), that is a 32 x 32 f32 copy (4 KiB), below even one pair's
// (a1: 6 KiB), so each attention's pair is a stack of its own.
TEST_F(PassStackFp8Test, ContextStacksKeepTheLargestDequantizedCopy) {
  const Graph g = fp8_attention_graph(DType::F32, false, false);
  ASSERT_TRUE(g.ok()) << g.status().str();
  Result<Graph> r = pass_stack_projections(g, false);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->find_weight("a1.to_k+a1.to_v+a2.to_k+a2.to_v", WeightLayout::STACK), kNoValue);
  for (const char* kv : {"a1.to_k+a1.to_v", "a2.to_k+a2.to_v"}) {
    const StackUse u = stack_use(*r, kv);
    ASSERT_NE(u.first, nullptr) << kv;
    EXPECT_EQ(u.first->kind, OpKind::CAST) << kv;
  }
}

TEST_F(PassStackFp8Test, FastFp8GemmsStackAsOneActivationCastAndOneFp8Gemm) {
  const Graph g = fp8_attention_graph(DType::F16, true);
  ASSERT_TRUE(g.ok()) << g.status().str();
  PassOptions o{false, false};
  o.fp8_linear = true;
  Result<Graph> fast = graph_passes(g, o, nullptr);
  ASSERT_TRUE(fast.ok()) << fast.status().str();
  o.stack = o.stack_qkv = true;
  Result<Graph> r = graph_passes(g, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().str();
  // a4's K and V read its fp8 weight itself here (no shared CAST), so it stacks as an f16
  // weight read twice does.
  const std::string kv = "a1.to_k+a1.to_v+a2.to_k+a2.to_v+a4.to_kv+a4.to_kv";
  const StackUse u = stack_use(*r, kv);
  ASSERT_NE(u.first, nullptr);
  EXPECT_EQ(u.first->kind, OpKind::LINEAR_FP8);
  EXPECT_EQ(u.first->inputs.size(), 2u);
  EXPECT_EQ(u.first->params.dtype, DType::F16);
  EXPECT_EQ(r->desc(u.first->inputs[1]).dtype, DType::F8_E4M3);
  const Value& xq = r->value(u.first->inputs[0]);
  ASSERT_GE(xq.producer, 0);
  const Node& quant = r->nodes()[size_t(xq.producer)];
  EXPECT_EQ(quant.kind, OpKind::CAST);
  EXPECT_EQ(quant.params.dtype, DType::F8_E4M3);
  EXPECT_EQ(quant.inputs[0], r->find_input("context"));
  ASSERT_NE(stack_use(*r, "s.to_q+s.to_k+s.to_v").first, nullptr);
  EXPECT_EQ(stack_use(*r, "s.to_q+s.to_k+s.to_v").first->kind, OpKind::LINEAR_FP8);
  // 6 + 3 fp8 GEMMs became 2, each with one activation CAST instead of one per GEMM; a3 (a
  // scaled part) is as the fp8 pass left it.
  EXPECT_EQ(kinds(*fast)[OpKind::LINEAR_FP8], kinds(*r)[OpKind::LINEAR_FP8] + 7);
  EXPECT_EQ(kinds(*fast)[OpKind::CAST], kinds(*r)[OpKind::CAST] + 7);
  EXPECT_EQ(node_named(*r, "a3.to_k")->kind, OpKind::LINEAR_FP8);
  EXPECT_FALSE(node_named(*r, "a3.attn")->params.kv_window);
}

// The CPU runs attention in f32 only, so the `_fast` check is the stacked GEMM itself: one
// LINEAR_FP8 of the stacked weight gives, column window by window, the bits of the parts' GEMMs.
TEST_F(PassStackFp8Test, FastStackedGemmComputesThePartsBits) {
  auto build = [](bool stacked) {
    Graph g;
    const ValueId x = g.input("x", TensorDesc{DType::F16, Shape{2, 5, 48}});
    OpParams quant;
    quant.dtype = DType::F8_E4M3;
    OpParams p;
    p.dtype = DType::F16;
    const int64_t rows[] = {32, 16, 64};
    const char* names[] = {"k", "v", "k2"};
    if (!stacked) {
      for (int i = 0; i < 3; ++i) {
        const ValueId xq = g.op(OpKind::CAST, quant, {x}, fmt::format("quant{}", i));
        const ValueId w = g.weight(names[i], TensorDesc{DType::F8_E4M3, Shape{rows[i], 48}});
        g.output(g.op(OpKind::LINEAR_FP8, p, {xq, w}, names[i]), names[i]);
      }
      return g;
    }
    const ValueId xq = g.op(OpKind::CAST, quant, {x}, "quant");
    const ValueId w = g.weight(weight_stack_name({"k", "v", "k2"}),
                               TensorDesc{DType::F8_E4M3, Shape{112, 48}}, WeightLayout::STACK);
    const ValueId y = g.op(OpKind::LINEAR_FP8, p, {xq, w}, "kv");
    int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      g.output(g.slice(y, 2, at, at + rows[i], 1, names[i]), names[i]);
      at += rows[i];
    }
    return g;
  };
  const Graph parts = build(false), stacked = build(true);
  ASSERT_TRUE(parts.ok()) << parts.status().str();
  ASSERT_TRUE(stacked.ok()) << stacked.status().str();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights map;
  fp8_bindings(parts, 3, inputs, map);
  test::StackingWeights weights(map);
  const std::vector<HostTensor> ref = run(parts, PassOptions{false, false}, inputs, weights);
  const std::vector<HostTensor> got = run(stacked, PassOptions{false, false}, inputs, weights);
  ASSERT_EQ(ref.size(), 3u);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bytes(got[i], ref[i])) << i;
}

}  // namespace
}  // namespace hr
