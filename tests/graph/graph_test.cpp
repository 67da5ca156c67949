// Graph builder: shape errors kept in status(), views, shared weights, structure keys.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hr
