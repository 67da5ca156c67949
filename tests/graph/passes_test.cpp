// Graph passes (graph/passes.h): the rewritten graph computes what the built one does (CPU,
// f32, random weights), and the rewrites happen where expected.
#include <gtest/gtest.h>

#include <map>

#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "graph_test_util.h"
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
                              test::MapWeights& weights) {
    Executor ex(*backend_, *alloc_);
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
  Executor ex(*backend_, *alloc_);
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
