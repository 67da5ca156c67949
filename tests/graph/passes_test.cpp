// Graph passes (graph/passes.h): the rewritten graph computes what the built one does (CPU,
// f32, random weights), and the rewrites happen where expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "graph_test_util.h"
#include "memory/executor_policies.h"
#include "test_compare.h"

namespace hr {
namespace {

TensorDesc f32(Shape s) { return TensorDesc{DType::F32, s}; }

// A miniature UNet level: resblock with a time embedding and a width change (1x1 skip),
// spatial transformer (tokens via reshape+permute, self-attention, linear residuals),
// upsampling, a skip concat, a stride-2 conv and an output conv, all NCHW as models build them.
Graph mini_unet() {
  Graph g;
  const int64_t B = 2, C = 16, H = 8, W = 6;
  auto w = [&](const std::string& n, Shape s) { return g.weight(n, f32(s)); };
  auto conv = [&](ValueId x, const std::string& n, int64_t in, int64_t out, int k, int stride) {
    return g.conv2d(x, w(n + ".w", {out, in, k, k}), w(n + ".b", {out}), stride, k / 2, n);
  };
  auto gn_silu = [&](ValueId x, const std::string& n, int64_t ch) {
    ValueId h = g.group_norm(x, w(n + ".g", {ch}), w(n + ".beta", {ch}), 4, 1e-5f, false, n);
    return g.unary(OpKind::SILU, h, n + ".silu");
  };
  ValueId x = g.input("x", f32({B, 4, H, W}));
  ValueId emb = g.input("emb", f32({B, 32}));
  ValueId h = conv(x, "conv_in", 4, C, 3, 1);
  // Resblock C -> 2C.
  ValueId r = gn_silu(h, "rb.norm1", C);
  r = conv(r, "rb.conv1", C, 2 * C, 3, 1);
  ValueId e = g.linear(g.unary(OpKind::SILU, emb, "emb.silu"), w("rb.emb.w", {2 * C, 32}),
                       w("rb.emb.b", {2 * C}), "rb.emb");
  e = g.reshape(e, Shape{B, 2 * C, 1, 1}, "rb.emb.reshape");
  r = g.add(r, e, "rb.emb_add");
  r = gn_silu(r, "rb.norm2", 2 * C);
  r = conv(r, "rb.conv2", 2 * C, 2 * C, 3, 1);
  h = g.add(conv(h, "rb.skip", C, 2 * C, 1, 1), r, "rb");
  // Spatial transformer on 2C channels.
  const int64_t ch = 2 * C;
  ValueId t = g.group_norm(h, w("st.norm.g", {ch}), w("st.norm.b", {ch}), 4, 1e-6f, false, "st.norm");
  t = g.reshape(t, Shape{B, ch, H * W}, "st.tokens");
  t = g.permute(t, {0, 2, 1}, "st.tokens");
  t = g.linear(t, w("st.proj_in.w", {ch, ch}), w("st.proj_in.b", {ch}), "st.proj_in");
  ValueId n1 = g.layer_norm(t, w("st.ln.g", {ch}), w("st.ln.b", {ch}), 1e-5f, "st.ln");
  ValueId q = g.linear(n1, w("st.q", {ch, ch}), kNoValue, "st.q");
  ValueId k = g.linear(n1, w("st.k", {ch, ch}), kNoValue, "st.k");
  ValueId v = g.linear(n1, w("st.v", {ch, ch}), kNoValue, "st.v");
  ValueId a = g.attention(q, k, v, 2, false, "st.attn");
  a = g.linear(a, w("st.out.w", {ch, ch}), w("st.out.b", {ch}), "st.out");
  t = g.add(a, t, "st.attn.residual");
  t = g.linear(t, w("st.proj_out.w", {ch, ch}), w("st.proj_out.b", {ch}), "st.proj_out");
  t = g.permute(t, {0, 2, 1}, "st.to_image");
  t = g.reshape(t, Shape{B, ch, H, W}, "st.to_image");
  h = g.add(t, h, "st");
  // Down, up, concat with the skip, output conv.
  ValueId d = conv(h, "down", ch, ch, 3, 2);
  OpParams up;
  up.factor = 2;
  d = g.op(OpKind::UPSAMPLE_NEAREST, up, {d}, "up");
  h = g.concat({d, h}, 1, "cat");
  h = gn_silu(h, "out.norm", 2 * ch);
  h = conv(h, "out.conv", 2 * ch, 4, 3, 1);
  g.output(h, "out");
  g.output(e, "emb_term");  // a non-image output keeps its layout
  return g;
}

std::map<OpKind, int> kinds(const Graph& g) {
  std::map<OpKind, int> m;
  for (const Node& n : g.nodes()) ++m[n.kind];
  return m;
}

int count_if(const Graph& g, bool (*pred)(const Node&)) {
  int k = 0;
  for (const Node& n : g.nodes()) k += pred(n) ? 1 : 0;
  return k;
}

class PassesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = cpu_backend_create(2);
    alloc_ = std::make_unique<Allocator>(*backend_);
  }
  std::vector<HostTensor> run(const Graph& g, std::optional<PassOptions> o, bool passes,
                              const std::map<std::string, HostTensor>& inputs,
                              WeightSource& weights) {
    Executor ex(*backend_, *alloc_, executor_policies_default(*backend_));
    ex.set_passes(passes);
    ex.set_pass_options(o);
    auto out = ex.run(g, test::host_inputs(inputs), weights);
    EXPECT_TRUE(out.ok()) << out.status().str();
    return out.ok() ? std::move(out).value() : std::vector<HostTensor>{};
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
};

TEST_F(PassesTest, ChannelsLastRewritesTheImagePath) {
  Graph g = mini_unet();
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto cl = pass_channels_last(g, nullptr);
  ASSERT_TRUE(cl.ok()) << cl.status().str();
  EXPECT_EQ(count_if(*cl, [](const Node& n) { return n.kind == OpKind::CONV2D && !n.params.channels_last; }), 0);
  EXPECT_EQ(count_if(*cl, [](const Node& n) { return n.kind == OpKind::GROUP_NORM && !n.params.channels_last; }), 0);
  EXPECT_EQ(count_if(*cl, [](const Node& n) { return n.kind == OpKind::UPSAMPLE_NEAREST && !n.params.channels_last; }), 0);
  // The only transposes left: the input into NHWC and the output back to NCHW (the token
  // rearrangements became views).
  EXPECT_EQ(kinds(*cl)[OpKind::PERMUTE], 2);
  for (const Value& v : cl->values())
    if (v.kind == ValueKind::WEIGHT && v.desc.shape.rank == 4) {
      EXPECT_EQ(v.layout, WeightLayout::CONV_OHWI) << v.name;
    }
  // Inputs and outputs keep names, descriptors and order.
  ASSERT_EQ(cl->outputs().size(), 2u);
  EXPECT_EQ(cl->value(cl->outputs()[0]).name, "out");
  EXPECT_EQ(cl->desc(cl->outputs()[0]), g.desc(g.outputs()[0]));
  EXPECT_EQ(cl->desc(cl->outputs()[1]), g.desc(g.outputs()[1]));
  EXPECT_EQ(cl->find_input("x"), g.find_input("x"));
}

TEST_F(PassesTest, FuseJoinsNormSiluAndResidualAdds) {
  Graph g = mini_unet();
  auto f = pass_fuse(g);
  ASSERT_TRUE(f.ok()) << f.status().str();
  auto m = kinds(*f);
  // Three GN+SiLU pairs fused (the transformer's norm has no SiLU).
  EXPECT_EQ(count_if(*f, [](const Node& n) { return n.kind == OpKind::GROUP_NORM && n.params.fuse_silu; }), 3);
  EXPECT_EQ(m[OpKind::SILU], 1);  // the embedding's
  // conv1 + emb term, conv2 + skip, attention out + residual. In NCHW the transformer's
  // output residual stays an ADD (a PERMUTE sits between proj_out and it) ...
  EXPECT_EQ(count_if(*f, [](const Node& n) { return n.params.add_input; }), 3);
  EXPECT_EQ(m[OpKind::ADD], 1);
  // ... channels-last makes it a view, and proj_out takes the residual too.
  auto both = graph_passes(g, PassOptions{true, true});
  ASSERT_TRUE(both.ok()) << both.status().str();
  EXPECT_EQ(count_if(*both, [](const Node& n) { return n.params.add_input; }), 4);
  EXPECT_EQ(kinds(*both)[OpKind::ADD], 0);
  // The operand computed last (the 1x1 skip conv, built after conv2) absorbed the other.
  bool skip_fused = false;
  for (const Node& n : both->nodes())
    skip_fused = skip_fused || (n.name == "rb.skip+rb" && n.params.add_input);
  EXPECT_TRUE(skip_fused);
}

TEST_F(PassesTest, RewrittenGraphsComputeTheSameResult) {
  Graph g = mini_unet();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 7, inputs, weights);
  std::vector<HostTensor> ref = run(g, std::nullopt, false, inputs, weights);
  ASSERT_EQ(ref.size(), 2u);
  for (PassOptions o : {PassOptions{true, false}, PassOptions{false, true}, PassOptions{true, true}}) {
    std::vector<HostTensor> got = run(g, o, true, inputs, weights);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      double err = test::rel_err(got[i], ref[i]);
      EXPECT_LT(err, 1e-5) << "channels_last " << o.channels_last << " fuse " << o.fuse
                           << " output " << i;
    }
  }
}

TEST_F(PassesTest, BackendChoosesChannelsLastOnlyWhereItHelps) {
  Graph g = mini_unet();
  EXPECT_FALSE(pass_options(g, *backend_).channels_last);  // the CPU prefers NCHW
  EXPECT_TRUE(pass_options(g, *backend_).fuse);
}

TEST_F(PassesTest, NodeTimingCoversEveryNode) {
  Graph g = mini_unet();
  std::map<std::string, HostTensor> inputs;
  test::MapWeights weights;
  test::bindings_fill(g, 3, inputs, weights);
  Executor ex(*backend_, *alloc_, executor_policies_default(*backend_));
  ex.set_node_timing(true);
  auto out = ex.run(g, test::host_inputs(inputs), weights);
  ASSERT_TRUE(out.ok()) << out.status().str();
  auto compiled = ex.compile(g);
  ASSERT_TRUE(compiled.ok());
  ASSERT_EQ(ex.node_ms().size(), (*compiled)->graph.nodes().size());
  double total = 0;
  for (double ms : ex.node_ms()) {
    EXPECT_GE(ms, 0.0);
    total += ms;
  }
  EXPECT_GT(total, 0.0);
}

// --- Note [stacked context projections] (pass_stack.cpp) --------------------------------------

// Cross-attentions a1..a3 (heads 2; head dims 8, 12, 8) whose bias-free to_k / to_v LINEARs read
// the INPUT "context" [2, 7, 24] and whose queries come from x [2, 10, 32]; a4 reads the context
// too but its to_k has a bias (not stackable); a self-attention "s" whose q, k and v are LINEARs
// of x; and a LINEAR "big" of x with a [big_rows, 32] weight, the graph's largest weight when
// big_rows >= 64, which sets the stacks' cap (Note [stacked context projections]). The k/v pairs
// are 3072, 4608 and 3072 bytes, so a cap of 8192 (big_rows 64) stacks a1+a2 and leaves a3 alone
// in a second stack; 65536 (big_rows 512) stacks all three.
Graph cross_attention_graph(int64_t big_rows, int attentions = 3) {
  Graph g;
  auto w = [&](const std::string& n, Shape s) { return g.weight(n, f32(s)); };
  ValueId x = g.input("x", f32({2, 10, 32}));
  ValueId ctx = g.input("context", f32({2, 7, 24}));
  const int64_t dims[] = {8, 12, 8};
  for (int i = 0; i < attentions; ++i) {
    const std::string a = fmt::format("a{}", i + 1);
    const int64_t hd = 2 * dims[i];
    ValueId q = g.linear(x, w(a + ".to_q", {hd, 32}), kNoValue, a + ".to_q");
    ValueId k = g.linear(ctx, w(a + ".to_k", {hd, 24}), kNoValue, a + ".to_k");
    ValueId v = g.linear(ctx, w(a + ".to_v", {hd, 24}), kNoValue, a + ".to_v");
    ValueId o = g.attention(q, k, v, 2, false, a + ".attn");
    g.output(g.linear(o, w(a + ".to_out", {32, hd}), w(a + ".to_out.b", {32}), a + ".to_out"),
             a);
  }
  {  // a4: a biased to_k
    ValueId q = g.linear(x, w("a4.to_q", {16, 32}), kNoValue, "a4.to_q");
    ValueId k = g.linear(ctx, w("a4.to_k", {16, 24}), w("a4.to_k.b", {16}), "a4.to_k");
    ValueId v = g.linear(ctx, w("a4.to_v", {16, 24}), kNoValue, "a4.to_v");
    g.output(g.attention(q, k, v, 2, false, "a4.attn"), "a4");
  }
  {  // s: a self-attention, k and v from its own hidden state
    ValueId q = g.linear(x, w("s.to_q", {16, 32}), kNoValue, "s.to_q");
    ValueId k = g.linear(x, w("s.to_k", {16, 32}), kNoValue, "s.to_k");
    ValueId v = g.linear(x, w("s.to_v", {16, 32}), kNoValue, "s.to_v");
    g.output(g.attention(q, k, v, 2, false, "s.attn"), "s");
  }
  g.output(g.linear(x, w("big", {big_rows, 32}), kNoValue, "big"), "big");
  return g;
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (n.name == name) return &n;
  return nullptr;
}

struct StackedWeight {
  std::string name;
  Shape shape;
};
std::vector<StackedWeight> stacked_weights(const Graph& g) {
  std::vector<StackedWeight> out;
  for (const Value& v : g.values())
    if (v.kind == ValueKind::WEIGHT && v.layout == WeightLayout::STACK)
      out.push_back({v.name, v.desc.shape});
  return out;
}

// The LINEAR producing value v (null when it is no LINEAR's output).
const Node* producer(const Graph& g, ValueId v) {
  const int p = g.value(v).producer;
  return p >= 0 && g.nodes()[size_t(p)].kind == OpKind::LINEAR ? &g.nodes()[size_t(p)] : nullptr;
}

void expect_window(const Graph& g, const std::string& attention, const std::string& weight,
                   int64_t k_at, int64_t v_at) {
  SCOPED_TRACE(attention);
  const Node* n = node_named(g, attention);
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->kind, OpKind::ATTENTION);
  EXPECT_TRUE(n->params.kv_window);
  EXPECT_EQ(n->params.start, k_at);
  EXPECT_EQ(n->params.end, v_at);
  EXPECT_EQ(n->params.heads, 2);
  ASSERT_EQ(n->inputs.size(), 3u);
  EXPECT_EQ(n->inputs[1], n->inputs[2]) << "K and V are windows of one stacked projection";
  const Node* kv = producer(g, n->inputs[1]);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->inputs[0], g.find_input("context"));
  ASSERT_EQ(kv->inputs.size(), 2u) << "no bias";
  EXPECT_EQ(g.value(kv->inputs[1]).name, weight);
  EXPECT_EQ(g.value(kv->inputs[1]).layout, WeightLayout::STACK);
  EXPECT_FALSE(kv->params.add_input);
}

// An attention left as built: K and V from their own LINEARs with these weights.
void expect_plain(const Graph& g, const std::string& attention, const std::string& k_weight,
                  const std::string& v_weight) {
  SCOPED_TRACE(attention);
  const Node* n = node_named(g, attention);
  ASSERT_NE(n, nullptr);
  EXPECT_FALSE(n->params.kv_window);
  ASSERT_EQ(n->inputs.size(), 3u);
  const Node* k = producer(g, n->inputs[1]);
  const Node* v = producer(g, n->inputs[2]);
  ASSERT_NE(k, nullptr);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(g.value(k->inputs[1]).name, k_weight);
  EXPECT_EQ(g.value(v->inputs[1]).name, v_weight);
  EXPECT_EQ(g.value(k->inputs[1]).layout, WeightLayout::STORED);
}

TEST_F(PassesTest, StackProjectionsSplitsAtTheCap) {
  Graph g = cross_attention_graph(64);
  ASSERT_TRUE(g.ok()) << g.status().str();
  ASSERT_EQ(g.value(g.find_weight("big")).desc.bytes(), 8192u);
  auto r = pass_stack_projections(g);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const Graph& s = *r;
  ASSERT_TRUE(s.ok()) << s.status().str();
  // 6 projections became 2 stacked GEMMs.
  EXPECT_EQ(kinds(g)[OpKind::LINEAR], 4 * 3 + 3 + 3 + 1);
  EXPECT_EQ(kinds(s)[OpKind::LINEAR], kinds(g)[OpKind::LINEAR] - 4);
  EXPECT_EQ(kinds(s)[OpKind::ATTENTION], 5);
  for (const char* gone : {"a1.to_k", "a1.to_v", "a2.to_k", "a2.to_v", "a3.to_k", "a3.to_v"})
    EXPECT_EQ(node_named(s, gone), nullptr) << gone;
  // Parts in order k1 v1 k2 v2; a1's K at 0 and V at 16, a2's at 32 and 56.
  const std::vector<StackedWeight> st = stacked_weights(s);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name, "a1.to_k+a1.to_v+a2.to_k+a2.to_v");
  EXPECT_EQ(st[0].shape, (Shape{16 + 16 + 24 + 24, 24}));
  EXPECT_EQ(st[1].name, "a3.to_k+a3.to_v");
  EXPECT_EQ(st[1].shape, (Shape{32, 24}));
  for (const StackedWeight& w : st) EXPECT_LE(w.shape.numel() * 4, 8192) << w.name;
  expect_window(s, "a1.attn", st[0].name, 0, 16);
  expect_window(s, "a2.attn", st[0].name, 32, 56);
  expect_window(s, "a3.attn", st[1].name, 0, 16);
  EXPECT_EQ(node_named(s, "a1.attn")->inputs[1], node_named(s, "a2.attn")->inputs[1]);
  EXPECT_NE(node_named(s, "a1.attn")->inputs[1], node_named(s, "a3.attn")->inputs[1]);
  EXPECT_EQ(s.shape(node_named(s, "a1.attn")->inputs[1]), (Shape{2, 7, 80}));
  // The biased projection and the self-attention are as built.
  expect_plain(s, "a4.attn", "a4.to_k", "a4.to_v");
  expect_plain(s, "s.attn", "s.to_k", "s.to_v");
  const Node* sk = producer(s, node_named(s, "s.attn")->inputs[1]);
  ASSERT_NE(sk, nullptr);
  EXPECT_EQ(sk->inputs[0], s.find_input("x"));
  EXPECT_NE(node_named(s, "a4.to_k"), nullptr);
  EXPECT_EQ(node_named(s, "a4.to_k")->inputs.size(), 3u);
  // Inputs and outputs keep their names, descriptors and order.
  ASSERT_EQ(s.outputs().size(), g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    EXPECT_EQ(s.value(s.outputs()[i]).name, g.value(g.outputs()[i]).name);
    EXPECT_EQ(s.desc(s.outputs()[i]), g.desc(g.outputs()[i]));
  }
  EXPECT_EQ(s.find_input("x"), g.find_input("x"));
  EXPECT_EQ(s.find_input("context"), g.find_input("context"));
  // graph_passes with stack on makes the same rewrite (after fusing, which changes nothing here).
  auto all = graph_passes(g, PassOptions{false, true, true});
  ASSERT_TRUE(all.ok()) << all.status().str();
  EXPECT_EQ(all->structure_key(), s.structure_key());
  // A second application finds nothing left to stack.
  auto twice = pass_stack_projections(s);
  ASSERT_TRUE(twice.ok()) << twice.status().str();
  EXPECT_EQ(twice->structure_key(), s.structure_key());
}

TEST_F(PassesTest, StackProjectionsStacksEveryPairUnderALargeCap) {
  auto r = pass_stack_projections(cross_attention_graph(512));
  ASSERT_TRUE(r.ok()) << r.status().str();
  const std::vector<StackedWeight> st = stacked_weights(*r);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].name, "a1.to_k+a1.to_v+a2.to_k+a2.to_v+a3.to_k+a3.to_v");
  EXPECT_EQ(st[0].shape, (Shape{112, 24}));
  expect_window(*r, "a1.attn", st[0].name, 0, 16);
  expect_window(*r, "a2.attn", st[0].name, 32, 56);
  expect_window(*r, "a3.attn", st[0].name, 80, 96);
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], 4 * 3 + 3 + 3 + 1 - 5);
  expect_plain(*r, "s.attn", "s.to_k", "s.to_v");
}

TEST_F(PassesTest, StackedProjectionsComputeTheSameResult) {
  for (int64_t big : {int64_t(64), int64_t(512)}) {
    SCOPED_TRACE(big);
    Graph g = cross_attention_graph(big);
    std::map<std::string, HostTensor> inputs;
    test::MapWeights map;
    test::bindings_fill(g, 11, inputs, map);
    test::StackingWeights weights(map);
    std::vector<HostTensor> ref = run(g, std::nullopt, false, inputs, weights);
    ASSERT_EQ(ref.size(), g.outputs().size());
    EXPECT_TRUE(weights.served.empty());
    for (PassOptions o : {PassOptions{false, false, true}, PassOptions{false, true, true}}) {
      weights.served.clear();
      std::vector<HostTensor> got = run(g, o, true, inputs, weights);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_EQ(weights.served.empty(), false) << "the stacked weights were asked for";
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_LT(test::rel_err(got[i], ref[i]), 1e-5)
            << "fuse " << o.fuse << " output " << g.value(g.outputs()[i]).name;
      }
    }
  }
}

// Attentions with different head counts share a stack whose width (2 * 24 + 2 * 16 = 80) not
// every head count divides: each attention reads only its own windows, H*D wide.
TEST_F(PassesTest, StackProjectionsMixesHeadCounts) {
  Graph g;
  ValueId x = g.input("x", f32({2, 10, 32}));
  ValueId ctx = g.input("context", f32({2, 7, 24}));
  const int heads[] = {3, 2};
  for (int i = 0; i < 2; ++i) {
    const std::string a = fmt::format("m{}", i);
    const int64_t hd = heads[i] * 8;
    ValueId q = g.linear(x, g.weight(a + ".to_q", f32({hd, 32})), kNoValue, a + ".to_q");
    ValueId k = g.linear(ctx, g.weight(a + ".to_k", f32({hd, 24})), kNoValue, a + ".to_k");
    ValueId v = g.linear(ctx, g.weight(a + ".to_v", f32({hd, 24})), kNoValue, a + ".to_v");
    g.output(g.attention(q, k, v, heads[i], false, a + ".attn"), a);
  }
  g.output(g.linear(x, g.weight("big", f32({256, 32})), kNoValue, "big"), "big");
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto r = pass_stack_projections(g);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const std::vector<StackedWeight> st = stacked_weights(*r);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].name, "m0.to_k+m0.to_v+m1.to_k+m1.to_v");
  EXPECT_EQ(st[0].shape, (Shape{80, 24}));
  EXPECT_EQ(node_named(*r, "m0.attn")->params.heads, 3);
  EXPECT_EQ(node_named(*r, "m0.attn")->params.start, 0);
  EXPECT_EQ(node_named(*r, "m0.attn")->params.end, 24);
  EXPECT_EQ(node_named(*r, "m1.attn")->params.start, 48);
  EXPECT_EQ(node_named(*r, "m1.attn")->params.end, 64);

  std::map<std::string, HostTensor> inputs;
  test::MapWeights map;
  test::bindings_fill(g, 5, inputs, map);
  test::StackingWeights weights(map);
  std::vector<HostTensor> ref = run(g, std::nullopt, false, inputs, weights);
  std::vector<HostTensor> got = run(g, PassOptions{false, true, true}, true, inputs, weights);
  ASSERT_EQ(ref.size(), 3u);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(test::rel_err(got[i], ref[i]), 1e-5) << i;
}

TEST_F(PassesTest, StackProjectionsNeedsTwoReadersOfTheContext) {
  // One cross-attention (and a4, whose biased to_k does not count) reading the context: as built.
  Graph g = cross_attention_graph(512, 1);
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto r = pass_stack_projections(g);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->structure_key(), g.structure_key());
  EXPECT_TRUE(stacked_weights(*r).empty());
  for (const Node& n : r->nodes()) EXPECT_FALSE(n.params.kv_window) << n.name;

  // Two pairs of different widths of context (K 24 wide, and K of a 12-wide second context):
  // grouped by their input, so nothing stacks either.
  Graph h;
  ValueId x = h.input("x", f32({1, 4, 16}));
  ValueId c1 = h.input("c1", f32({1, 5, 24}));
  ValueId c2 = h.input("c2", f32({1, 5, 12}));
  for (int i = 0; i < 2; ++i) {
    const std::string a = fmt::format("b{}", i);
    ValueId c = i == 0 ? c1 : c2;
    const int64_t cw = i == 0 ? 24 : 12;
    ValueId q = h.linear(x, h.weight(a + ".q", f32({16, 16})), kNoValue, a + ".q");
    ValueId k = h.linear(c, h.weight(a + ".k", f32({16, cw})), kNoValue, a + ".k");
    ValueId v = h.linear(c, h.weight(a + ".v", f32({16, cw})), kNoValue, a + ".v");
    h.output(h.attention(q, k, v, 2, false, a), a);
  }
  ASSERT_TRUE(h.ok()) << h.status().str();
  auto rh = pass_stack_projections(h);
  ASSERT_TRUE(rh.ok()) << rh.status().str();
  EXPECT_EQ(rh->structure_key(), h.structure_key());
}

TEST_F(PassesTest, StackProjectionsOnlyOnDeviceMemory) {
  Graph g = cross_attention_graph(64);
  // The CPU computes on host memory: a stacked weight would be a second host copy.
  EXPECT_FALSE(pass_options(g, *backend_).stack);
  EXPECT_FALSE(PassOptions{}.stack);
  // A backend with device memory stacks, unless HEADROOM_STACK_PROJECTIONS=0.
  test::PlanKernels device;
  const char* before = std::getenv("HEADROOM_STACK_PROJECTIONS");
  const std::string saved = before ? before : "";
  ::unsetenv("HEADROOM_STACK_PROJECTIONS");
  EXPECT_TRUE(pass_options(g, device).stack);
  ::setenv("HEADROOM_STACK_PROJECTIONS", "0", 1);
  EXPECT_FALSE(pass_options(g, device).stack);
  if (before)
    ::setenv("HEADROOM_STACK_PROJECTIONS", saved.c_str(), 1);
  else
    ::unsetenv("HEADROOM_STACK_PROJECTIONS");
  // The CPU backend's own choice leaves the projections alone.
  auto r = graph_passes(g, *backend_);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_TRUE(stacked_weights(*r).empty());
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], kinds(g)[OpKind::LINEAR]);
}

// --- The self-attention mode (PassOptions::stack_qkv) -----------------------------------------

// s.attn read as windows of one [B, N, 3C] projection of x: Q at 0, K at C, V at 2C.
void expect_qkv_window(const Graph& g, const std::string& attention, const std::string& weight,
                       const std::string& input, int64_t c, int heads) {
  SCOPED_TRACE(attention);
  const Node* n = node_named(g, attention);
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->kind, OpKind::ATTENTION);
  EXPECT_TRUE(n->params.kv_window);
  EXPECT_EQ(n->params.q_start, 0);
  EXPECT_EQ(n->params.q_width, c);
  EXPECT_EQ(n->params.start, c);
  EXPECT_EQ(n->params.end, 2 * c);
  EXPECT_EQ(n->params.heads, heads);
  ASSERT_EQ(n->inputs.size(), 3u);
  EXPECT_EQ(n->inputs[0], n->inputs[1]) << "Q, K and V are windows of one stacked projection";
  EXPECT_EQ(n->inputs[1], n->inputs[2]);
  const Node* qkv = producer(g, n->inputs[0]);
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->inputs[0], g.find_input(input));
  ASSERT_EQ(qkv->inputs.size(), 2u) << "no bias";
  EXPECT_FALSE(qkv->params.add_input);
  EXPECT_EQ(g.value(qkv->inputs[1]).name, weight);
  EXPECT_EQ(g.value(qkv->inputs[1]).layout, WeightLayout::STACK);
  const Shape xs = g.shape(g.find_input(input));
  EXPECT_EQ(g.shape(n->inputs[0]), (Shape{xs[0], xs[1], 3 * c}));
  EXPECT_EQ(g.shape(n->output), (Shape{xs[0], xs[1], c})) << "the output stays dense";
}

TEST_F(PassesTest, StackProjectionsSelfAttentionMode) {
  Graph g = cross_attention_graph(512);
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto off = pass_stack_projections(g);
  ASSERT_TRUE(off.ok()) << off.status().str();
  expect_plain(*off, "s.attn", "s.to_k", "s.to_v");
  auto r = pass_stack_projections(g, true);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const Graph& s = *r;
  ASSERT_TRUE(s.ok()) << s.status().str();
  // The context stack as without the mode, then s's [Wq; Wk; Wv] (3 x 16 rows of x's 32).
  const std::vector<StackedWeight> st = stacked_weights(s);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name, "a1.to_k+a1.to_v+a2.to_k+a2.to_v+a3.to_k+a3.to_v");
  EXPECT_EQ(st[0].shape, (Shape{112, 24}));
  EXPECT_EQ(st[1].name, "s.to_q+s.to_k+s.to_v");
  EXPECT_EQ(st[1].shape, (Shape{48, 32}));
  expect_window(s, "a1.attn", st[0].name, 0, 16);
  expect_window(s, "a2.attn", st[0].name, 32, 56);
  expect_window(s, "a3.attn", st[0].name, 80, 96);
  for (const char* a : {"a1.attn", "a2.attn", "a3.attn"}) {
    EXPECT_EQ(node_named(s, a)->params.q_width, 0) << a << ": a cross-attention's q stays dense";
    EXPECT_EQ(node_named(s, a)->params.q_start, 0) << a;
  }
  expect_qkv_window(s, "s.attn", st[1].name, "x", 16, 2);
  for (const char* gone : {"s.to_q", "s.to_k", "s.to_v"})
    EXPECT_EQ(node_named(s, gone), nullptr) << gone;
  EXPECT_NE(node_named(s, "a1.to_q"), nullptr) << "cross-attention queries stay separate";
  expect_plain(s, "a4.attn", "a4.to_k", "a4.to_v");
  // Three projections became one GEMM.
  EXPECT_EQ(kinds(s)[OpKind::LINEAR], kinds(*off)[OpKind::LINEAR] - 2);
  EXPECT_EQ(kinds(s)[OpKind::ATTENTION], kinds(g)[OpKind::ATTENTION]);
  ASSERT_EQ(s.outputs().size(), g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    EXPECT_EQ(s.value(s.outputs()[i]).name, g.value(g.outputs()[i]).name);
    EXPECT_EQ(s.desc(s.outputs()[i]), g.desc(g.outputs()[i]));
  }
  // graph_passes takes the mode from PassOptions::stack_qkv.
  auto all = graph_passes(g, PassOptions{false, true, true, true});
  ASSERT_TRUE(all.ok()) << all.status().str();
  EXPECT_EQ(all->structure_key(), s.structure_key());
  auto kv_only = graph_passes(g, PassOptions{false, true, true, false});
  ASSERT_TRUE(kv_only.ok()) << kv_only.status().str();
  EXPECT_EQ(kv_only->structure_key(), off->structure_key());
  EXPECT_NE(kv_only->structure_key(), s.structure_key());
  // A second application finds nothing left to stack.
  auto twice = pass_stack_projections(s, true);
  ASSERT_TRUE(twice.ok()) << twice.status().str();
  EXPECT_EQ(twice->structure_key(), s.structure_key());
}

// Self-attentions, each of its own hidden state (so that the context mode, which stacks K/V
// pairs of an input two attentions read, takes none of them): "ok" (4 heads, causal) stacks;
// the others are as built: "b" (to_q has a bias), "r" (to_k's output has a second reader), "w"
// (to_v 24 rows: Dv != D), "c" (K and V of another input).
Graph self_attention_variants() {
  Graph g;
  auto w = [&](const std::string& n, Shape s) { return g.weight(n, f32(s)); };
  for (const char* a : {"ok", "b", "r", "w", "c"}) {
    const std::string p = a;
    ValueId x = g.input(p + ".x", f32({2, 9, 24}));
    ValueId kv_in = p == "c" ? g.input("c.other", f32({2, 9, 24})) : x;
    ValueId q = g.linear(x, w(p + ".to_q", {16, 24}), p == "b" ? w("b.to_q.b", {16}) : kNoValue,
                         p + ".to_q");
    ValueId k = g.linear(kv_in, w(p + ".to_k", {16, 24}), kNoValue, p + ".to_k");
    ValueId v = g.linear(kv_in, w(p + ".to_v", {p == "w" ? 24 : 16, 24}), kNoValue, p + ".to_v");
    if (p == "r") g.output(g.unary(OpKind::SILU, k, "r.k.silu"), "r.k.silu");
    const int heads = p == "ok" ? 4 : 2;
    ValueId o = g.attention(q, k, v, heads, p == "ok", p + ".attn");
    g.output(g.linear(o, w(p + ".to_out", {24, p == "w" ? 24 : 16}), w(p + ".to_out.b", {24}),
                      p + ".to_out"),
             p);
  }
  return g;
}

TEST_F(PassesTest, StackProjectionsSelfAttentionNeedsPlainProjections) {
  Graph g = self_attention_variants();
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto off = pass_stack_projections(g);
  ASSERT_TRUE(off.ok()) << off.status().str();
  EXPECT_EQ(off->structure_key(), g.structure_key()) << "no context to stack";
  auto r = pass_stack_projections(g, true);
  ASSERT_TRUE(r.ok()) << r.status().str();
  const std::vector<StackedWeight> st = stacked_weights(*r);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].name, "ok.to_q+ok.to_k+ok.to_v");
  EXPECT_EQ(st[0].shape, (Shape{48, 24}));
  expect_qkv_window(*r, "ok.attn", st[0].name, "ok.x", 16, 4);
  EXPECT_TRUE(node_named(*r, "ok.attn")->params.causal);
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], kinds(g)[OpKind::LINEAR] - 2);
  for (const char* a : {"b", "r", "w", "c"}) {
    const std::string p = a;
    expect_plain(*r, p + ".attn", p + ".to_k", p + ".to_v");
    const Node* n = node_named(*r, p + ".attn");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->params.q_width, 0) << p;
    const Node* q = producer(*r, n->inputs[0]);
    ASSERT_NE(q, nullptr) << p;
    EXPECT_EQ(r->value(q->inputs[1]).name, p + ".to_q");
    EXPECT_EQ(r->value(q->inputs[1]).layout, WeightLayout::STORED);
  }
  EXPECT_EQ(node_named(*r, "b.to_q")->inputs.size(), 3u) << "the bias kept";
  // r's to_k still feeds both of its readers.
  const Node* silu = node_named(*r, "r.k.silu");
  ASSERT_NE(silu, nullptr);
  EXPECT_EQ(silu->inputs[0], node_named(*r, "r.attn")->inputs[1]);
}

TEST_F(PassesTest, SelfAttentionStackedProjectionsComputeTheSameResult) {
  struct Named {
    const char* what;
    Graph g;
    const char* stack;  // a stacked weight the run must ask for
  };
  std::vector<Named> graphs;
  graphs.push_back(
      {"cross_attention_graph(64)", cross_attention_graph(64), "s.to_q+s.to_k+s.to_v"});
  graphs.push_back(
      {"cross_attention_graph(512)", cross_attention_graph(512), "s.to_q+s.to_k+s.to_v"});
  graphs.push_back({"variants", self_attention_variants(), "ok.to_q+ok.to_k+ok.to_v"});
  graphs.push_back({"mini_unet", mini_unet(), "st.q+st.k+st.v"});
  for (const Named& t : graphs) {
    SCOPED_TRACE(t.what);
    const Graph& g = t.g;
    ASSERT_TRUE(g.ok()) << g.status().str();
    std::map<std::string, HostTensor> inputs;
    test::MapWeights map;
    test::bindings_fill(g, 13, inputs, map);
    test::StackingWeights weights(map);
    std::vector<HostTensor> ref = run(g, std::nullopt, false, inputs, weights);
    ASSERT_EQ(ref.size(), g.outputs().size());
    weights.served.clear();
    std::vector<HostTensor> got =
        run(g, PassOptions{false, true, true, true}, true, inputs, weights);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_NE(std::find(weights.served.begin(), weights.served.end(), t.stack),
              weights.served.end())
        << "the stacked weight " << t.stack << " was asked for";
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LT(test::rel_err(got[i], ref[i]), 1e-5) << g.value(g.outputs()[i]).name;
  }
}

TEST_F(PassesTest, StackQkvWhereverStackingRuns) {
  Graph g = cross_attention_graph(64);
  EXPECT_FALSE(PassOptions{}.stack_qkv);
  test::PlanKernels device;
  const char* names[] = {"HEADROOM_STACK_QKV", "HEADROOM_STACK_PROJECTIONS"};
  std::string saved[2];
  bool was_set[2];
  for (int i = 0; i < 2; ++i) {
    const char* e = std::getenv(names[i]);
    was_set[i] = e != nullptr;
    saved[i] = e ? e : "";
    ::unsetenv(names[i]);
  }
  // On by default wherever the context stacking is on.
  EXPECT_TRUE(pass_options(g, device).stack);
  EXPECT_TRUE(pass_options(g, device).stack_qkv);
  ::setenv("HEADROOM_STACK_QKV", "1", 1);
  EXPECT_TRUE(pass_options(g, device).stack);
  EXPECT_TRUE(pass_options(g, device).stack_qkv);
  // Only with the stacking pass itself on: not on the host-memory CPU, not with it turned off.
  EXPECT_FALSE(pass_options(g, *backend_).stack_qkv);
  ::setenv("HEADROOM_STACK_PROJECTIONS", "0", 1);
  EXPECT_FALSE(pass_options(g, device).stack_qkv);
  ::unsetenv("HEADROOM_STACK_PROJECTIONS");
  ::setenv("HEADROOM_STACK_QKV", "0", 1);
  EXPECT_FALSE(pass_options(g, device).stack_qkv);
  // The CPU's own choice with HEADROOM_STACK_QKV=1 leaves every projection alone.
  ::setenv("HEADROOM_STACK_QKV", "1", 1);
  auto r = graph_passes(g, *backend_);
  for (int i = 0; i < 2; ++i) {
    if (was_set[i])
      ::setenv(names[i], saved[i].c_str(), 1);
    else
      ::unsetenv(names[i]);
  }
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_TRUE(stacked_weights(*r).empty());
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], kinds(g)[OpKind::LINEAR]);
}

}  // namespace
}  // namespace hr

namespace hr {
namespace {

TEST(WeightLayout, ConvFilterToOhwi) {
  for (DType dt : {DType::F32, DType::F16}) {
    HostTensor w(DType::F32, Shape{3, 4, 2, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = float(i);
    HostTensor stored = dt == DType::F32 ? w.clone() : w.to(dt);
    auto r = weight_relayout(stored, WeightLayout::CONV_OHWI);
    ASSERT_TRUE(r.ok()) << r.status().str();
    EXPECT_EQ(r->shape(), (Shape{3, 2, 3, 4}));
    HostTensor got = r->to(DType::F32);
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t y = 0; y < 2; ++y)
          for (int64_t x = 0; x < 3; ++x)
            ASSERT_EQ(got.f32()[((o * 2 + y) * 3 + x) * 4 + c], w.f32()[((o * 4 + c) * 2 + y) * 3 + x]);
  }
  auto bad = weight_relayout(HostTensor(DType::F32, Shape{4, 5}), WeightLayout::CONV_OHWI);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::INVALID_ARGUMENT);
  auto same = weight_relayout(HostTensor(DType::F32, Shape{4, 5}), WeightLayout::STORED);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->shape(), (Shape{4, 5}));
}

}  // namespace
}  // namespace hr
