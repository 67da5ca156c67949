// Graph builder: shape errors kept in status(), views, shared weights, structure keys.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace hr {
namespace {

TensorDesc f32(std::initializer_list<int64_t> d) { return TensorDesc{DType::F32, Shape(d)}; }

TEST(Graph, BuildsNodesWithInferredShapes) {
  Graph g;
  ValueId x = g.input("x", f32({2, 8, 16}));
  ValueId w = g.weight("w", f32({32, 16}));
  ValueId b = g.weight("b", f32({32}));
  ValueId y = g.linear(x, w, b, "proj");
  ValueId z = g.unary(OpKind::GELU, y);
  g.output(z, "z");
  ASSERT_TRUE(g.ok()) << g.status().str();
  EXPECT_EQ(g.shape(y), (Shape{2, 8, 32}));
  EXPECT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0].name, "proj");
  EXPECT_EQ(g.nodes()[1].name, "gelu.1");  // default name: op and node index
  EXPECT_EQ(g.value(y).producer, 0);
  EXPECT_EQ(g.outputs(), std::vector<ValueId>{z});
  EXPECT_EQ(g.value(z).name, "z");
  EXPECT_EQ(g.weight_bytes(), (32u * 16 + 32) * 4);
  EXPECT_EQ(g.find_input("x"), x);
  EXPECT_EQ(g.find_weight("b"), b);
  EXPECT_EQ(g.find_weight("nope"), kNoValue);
}

TEST(Graph, FirstShapeErrorIsKeptAndNamesTheNode) {
  Graph g;
  ValueId x = g.input("x", f32({2, 16}));
  ValueId bad = g.linear(x, g.weight("w", f32({8, 15})), kNoValue, "blocks.3.proj");
  EXPECT_EQ(bad, kNoValue);
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(g.status().message().find("blocks.3.proj"), std::string::npos) << g.status().str();
  EXPECT_NE(g.status().message().find("linear"), std::string::npos);
  // Later calls build straight through and return kNoValue; the first error stays.
  ValueId later = g.unary(OpKind::SILU, bad, "later");
  EXPECT_EQ(later, kNoValue);
  EXPECT_EQ(g.add(x, x, "fine_but_after_error"), kNoValue);
  g.output(later, "out");
  EXPECT_NE(g.status().message().find("blocks.3.proj"), std::string::npos);
  EXPECT_TRUE(g.nodes().empty());
}

TEST(Graph, MissingOperandIsAnError) {
  Graph g;
  ValueId x = g.input("x", f32({2, 16}));
  EXPECT_EQ(g.add(x, kNoValue, "sum"), kNoValue);
  EXPECT_NE(g.status().message().find("sum"), std::string::npos) << g.status().str();
}

TEST(Graph, ReshapeIsAViewOfItsRootStorage) {
  Graph g;
  ValueId x = g.input("x", f32({4, 6}));
  ValueId a = g.unary(OpKind::SILU, x);
  ValueId v1 = g.reshape(a, Shape{24});
  ValueId v2 = g.reshape(v1, Shape{2, 12});
  EXPECT_EQ(g.value(a).view_of, kNoValue);
  EXPECT_EQ(g.value(v1).view_of, a);
  EXPECT_EQ(g.value(v2).view_of, a);
  EXPECT_EQ(g.storage_of(v2), a);
  EXPECT_EQ(g.storage_of(a), a);
  EXPECT_EQ(g.reshape(a, Shape{5, 5}, "bad_view"), kNoValue);
  EXPECT_NE(g.status().message().find("bad_view"), std::string::npos);
}

TEST(Graph, WeightsAreSharedByNameAndChecked) {
  Graph g;
  ValueId w1 = g.weight("w", f32({4, 4}));
  ValueId w2 = g.weight("w", f32({4, 4}));
  EXPECT_EQ(w1, w2);
  EXPECT_TRUE(g.ok());
  EXPECT_EQ(g.weight("w", f32({4, 5})), kNoValue);
  EXPECT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'w'"), std::string::npos);

  Graph h;
  h.input("x", f32({1}));
  EXPECT_EQ(h.input("x", f32({1})), kNoValue);
  EXPECT_FALSE(h.ok());
}

Graph sample(float alpha, int64_t width, const std::string& wname, bool mark_extra) {
  Graph g;
  ValueId x = g.input("x", f32({2, width}));
  ValueId y = g.linear(x, g.weight(wname, f32({8, width})), kNoValue, "proj");
  ValueId z = g.scale(y, alpha, 0.0f, "s");
  g.output(z, "z");
  if (mark_extra) g.output(y, "y");
  return g;
}

TEST(Graph, StructureKeySeparatesGraphs) {
  const std::string base = sample(0.5f, 16, "w", false).structure_key();
  EXPECT_EQ(base, sample(0.5f, 16, "w", false).structure_key());
  EXPECT_NE(base, sample(0.25f, 16, "w", false).structure_key());   // a parameter
  EXPECT_NE(base, sample(-0.5f, 16, "w", false).structure_key());
  EXPECT_NE(base, sample(0.5f, 32, "w", false).structure_key());    // a shape
  EXPECT_NE(base, sample(0.5f, 16, "w2", false).structure_key());   // a weight name
  EXPECT_NE(base, sample(0.5f, 16, "w", true).structure_key());     // an output mark

  // Fields OpParams::str does not print still count.
  Graph a, b;
  OpParams pa, pb;
  pb.eps = 1e-6f;  // SCALE prints only alpha and beta
  a.op(OpKind::SCALE, pa, {a.input("x", f32({3}))});
  b.op(OpKind::SCALE, pb, {b.input("x", f32({3}))});
  EXPECT_NE(a.structure_key(), b.structure_key());

  // dtype matters.
  Graph c, d;
  c.output(c.unary(OpKind::SILU, c.input("x", f32({3}))), "y");
  d.output(d.unary(OpKind::SILU, d.input("x", TensorDesc{DType::F16, Shape{3}})), "y");
  EXPECT_NE(c.structure_key(), d.structure_key());
}

TEST(Graph, ConvenienceBuildersSetParams) {
  Graph g;
  ValueId x = g.input("x", f32({1, 8, 16, 16}));
  ValueId c = g.conv2d(x, g.weight("cw", f32({4, 8, 3, 3})), g.weight("cb", f32({4})), 2, 1);
  EXPECT_EQ(g.shape(c), (Shape{1, 4, 8, 8}));
  ValueId n = g.group_norm(c, g.weight("g", f32({4})), g.weight("b", f32({4})), 2, 1e-6f, true);
  EXPECT_TRUE(g.nodes().back().params.fuse_silu);
  ValueId p = g.permute(n, {0, 2, 3, 1});
  EXPECT_EQ(g.shape(p), (Shape{1, 8, 8, 4}));
  ValueId s = g.slice(p, 1, 2, 6, 2);
  EXPECT_EQ(g.shape(s), (Shape{1, 2, 8, 4}));
  ValueId k = g.concat({p, p}, -1);
  EXPECT_EQ(g.shape(k), (Shape{1, 8, 8, 8}));
  ValueId h = g.cast(k, DType::F16);
  EXPECT_EQ(g.desc(h).dtype, DType::F16);
  ValueId t = g.reshape(k, Shape{1, 64, 8});
  ValueId a = g.attention(t, t, t, 2, true);
  EXPECT_TRUE(g.nodes().back().params.causal);
  EXPECT_EQ(g.nodes().back().params.heads, 2);
  ValueId l = g.layer_norm(a, g.weight("lg", f32({8})), kNoValue, 1e-5f);
  EXPECT_EQ(g.nodes().back().inputs.size(), 2u);
  EXPECT_EQ(g.shape(l), (Shape{1, 64, 8}));
  ASSERT_TRUE(g.ok()) << g.status().str();
}

// The transformer ops' builders: RMS_NORM with and without a weight, ROPE's pairing, and the
// pairing in the structure key (OpParams::str prints it, the key must hold it too).
TEST(Graph, RmsNormAndRopeBuilders) {
  auto build = [](bool half_split) {
    Graph g;
    ValueId q = g.input("q", f32({2, 6, 4, 16}));
    ValueId n = g.rms_norm(q, g.weight("scale", f32({16})), 1e-6f, "q_norm");
    EXPECT_EQ(g.nodes().back().kind, OpKind::RMS_NORM);
    EXPECT_EQ(g.nodes().back().params.eps, 1e-6f);
    EXPECT_EQ(g.nodes().back().inputs.size(), 2u);
    ValueId r = g.rope(n, g.input("pe", f32({6, 8, 2})), half_split, "rope");
    EXPECT_EQ(g.nodes().back().params.rope_half_split, half_split);
    EXPECT_EQ(g.shape(r), (Shape{2, 6, 4, 16}));
    ValueId u = g.rms_norm(g.reshape(r, Shape{2, 6, 64}), kNoValue, 1e-5f, "plain");
    EXPECT_EQ(g.nodes().back().inputs.size(), 1u);
    g.output(u, "y");
    EXPECT_TRUE(g.ok()) << g.status().str();
    return g;
  };
  EXPECT_NE(build(false).structure_key(), build(true).structure_key());
  // A table that does not fit is the graph's first error.
  Graph bad;
  bad.rope(bad.input("q", f32({1, 6, 4, 16})), bad.input("pe", f32({5, 8, 2})), false);
  EXPECT_FALSE(bad.ok());
}

// A kv_window attention and a stacked weight are keyed apart from their plain forms.
TEST(Graph, StructureKeySeparatesWindowsAndStackedWeights) {
  auto window = [](bool kv_window, int64_t k_at, WeightLayout layout) {
    Graph g;
    ValueId q = g.input("q", f32({1, 4, 16}));
    ValueId ctx = g.input("ctx", f32({1, 5, 8}));
    ValueId kv = g.linear(ctx, g.weight("k+v", f32({32, 8}), layout), kNoValue, "kv");
    OpParams p;
    p.heads = 2;
    p.kv_window = kv_window;
    p.start = k_at;
    p.end = 16;
    ValueId a = g.op(OpKind::ATTENTION, p, {q, kv, kv}, "attn");
    if (a != kNoValue) g.output(a, "y");
    return g;
  };
  Graph w = window(true, 0, WeightLayout::STACK);
  ASSERT_TRUE(w.ok()) << w.status().str();
  EXPECT_EQ(w.shape(w.outputs()[0]), (Shape{1, 4, 16}));
  const std::string base = w.structure_key();
  EXPECT_EQ(base, window(true, 0, WeightLayout::STACK).structure_key());
  EXPECT_NE(base, window(true, 8, WeightLayout::STACK).structure_key());     // K's column
  EXPECT_NE(base, window(true, 0, WeightLayout::STORED).structure_key());    // the layout
  // The same params without kv_window read k and v whole: op_infer refuses k [1, 5, 32].
  Graph g = window(false, 0, WeightLayout::STACK);
  EXPECT_FALSE(g.ok());
}

// Note [weight layouts], WeightLayout::STACK: a stacked weight's name is its parts joined by
// '+', and the parts come back from it in order.
TEST(WeightStack, NameRoundTrips) {
  const std::vector<std::vector<std::string>> cases = {
      {"down.0.attn2.to_k.weight", "down.0.attn2.to_v.weight", "down.1.attn2.to_k.weight",
       "down.1.attn2.to_v.weight"},
      {"a", "b"},
      {"only.one"},
      {"x.weight", "x.weight"},  // a repeated part stays repeated
  };
  for (const auto& parts : cases) {
    const std::string name = weight_stack_name(parts);
    EXPECT_EQ(weight_stack_parts(name), parts) << name;
  }
  EXPECT_EQ(weight_stack_name({"a", "b", "c"}), "a+b+c");
  EXPECT_EQ(weight_stack_name({"w"}), "w");
  EXPECT_EQ(weight_stack_parts("a+b+c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(std::string(weight_layout_name(WeightLayout::STACK)), "stack");
  // The descriptor follows from the parts, not from one stored tensor.
  Result<TensorDesc> d = weight_layout_desc(f32({4, 3}), WeightLayout::STACK);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::INVALID_ARGUMENT);
}

HostTensor iota(DType dtype, Shape s, float from) {
  HostTensor t(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = from + float(i);
  return dtype == DType::F32 ? std::move(t) : t.to(dtype);
}

TEST(WeightStack, ConcatenatesAlongTheFirstDim) {
  for (DType dt : {DType::F32, DType::F16}) {
    HostTensor a = iota(dt, Shape{2, 3}, 0.0f);
    HostTensor b = iota(dt, Shape{1, 3}, 100.0f);
    HostTensor c = iota(dt, Shape{3, 3}, 200.0f);
    auto r = weight_stack({&a, &b, &c});
    ASSERT_TRUE(r.ok()) << r.status().str();
    EXPECT_EQ(r->desc(), (TensorDesc{dt, Shape{6, 3}}));
    HostTensor got = r->to(DType::F32);
    const float want[18] = {0,   1,   2,   3,   4,   5,   100, 101, 102,
                            200, 201, 202, 203, 204, 205, 206, 207, 208};
    for (int i = 0; i < 18; ++i) EXPECT_EQ(got.f32()[i], want[i]) << dtype_name(dt) << " at " << i;
  }
  // Higher-rank parts stack along dim 0 too; one part is a copy.
  HostTensor x = iota(DType::F32, Shape{1, 2, 2}, 0.0f), y = iota(DType::F32, Shape{2, 2, 2}, 10.0f);
  auto r3 = weight_stack({&x, &y});
  ASSERT_TRUE(r3.ok()) << r3.status().str();
  EXPECT_EQ(r3->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(r3->f32()[3], 3.0f);
  EXPECT_EQ(r3->f32()[4], 10.0f);
  EXPECT_EQ(r3->f32()[11], 17.0f);
  auto one = weight_stack({&y});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape(), y.shape());
  EXPECT_NE(one->data(), y.data());
  EXPECT_EQ(std::memcmp(one->data(), y.data(), y.bytes()), 0);
}

TEST(WeightStack, RejectsPartsThatDoNotStack) {
  HostTensor a = iota(DType::F32, Shape{2, 3}, 0.0f);
  HostTensor wide = iota(DType::F32, Shape{2, 4}, 0.0f);
  HostTensor half = iota(DType::F16, Shape{2, 3}, 0.0f);
  HostTensor flat = iota(DType::F32, Shape{3}, 0.0f);
  HostTensor deep = iota(DType::F32, Shape{2, 3, 1}, 0.0f);
  for (const HostTensor* bad : {&wide, &half, &flat, &deep}) {
    auto r = weight_stack({&a, bad});
    ASSERT_FALSE(r.ok()) << bad->desc().str();
    EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT) << bad->desc().str();
    auto rev = weight_stack({bad, &a});
    ASSERT_FALSE(rev.ok()) << bad->desc().str();
    EXPECT_EQ(rev.status().code(), ErrorCode::INVALID_ARGUMENT);
  }
  auto none = weight_stack({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hr
