// The fp8-linear pass (Note [fp8 linear] in graph/pass_fp8.cpp): which linear layers become fp8
// GEMMs, what they read, and that the fusion pass then adds residuals into them.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "graph/graph.h"
#include "graph/passes.h"

namespace hr {
namespace {

class Fp8Kernels final : public BackendKernels {
 public:
  bool fp8 = true;
  bool op_supported(OpKind, DType) const override { return true; }
  bool runs_fp8_gemm() const override { return fp8; }
  size_t op_workspace(OpKind, const OpParams&, std::span<const TensorDesc>,
                      const TensorDesc&) const override {
    return 0;
  }
  Status op_run(const OpCall&, Stream*) override { return Status(ErrorCode::UNSUPPORTED, "plan"); }
};

std::map<OpKind, int> kinds(const Graph& g) {
  std::map<OpKind, int> k;
  for (const Node& n : g.nodes()) ++k[n.kind];
  return k;
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (n.name == name) return &n;
  return nullptr;
}

// x -> l1 (scaled, bias) -> l2 (+ x residual) -> l3 (not fast) -> l4 (K = 40: not a multiple of 16).
Graph fp8_graph(DType dtype) {
  auto map = std::make_shared<WeightStorageMap>();
  (*map)["l1.weight"] = WeightStorage{DType::F8_E4M3, "l1.scale_weight", true};
  (*map)["l2.weight"] = WeightStorage{DType::F8_E4M3, "", true};
  (*map)["l3.weight"] = WeightStorage{DType::F8_E4M3, "", false};
  (*map)["l4.weight"] = WeightStorage{DType::F8_E4M3, "", true};
  Graph g;
  g.set_weight_storage(map);
  const ValueId x = g.input("x", TensorDesc{dtype, Shape{2, 8, 32}});
  ValueId y = g.linear(x, g.weight("l1.weight", TensorDesc{dtype, Shape{48, 32}}),
                       g.weight("l1.bias", TensorDesc{dtype, Shape{48}}), "l1");
  y = g.linear(y, g.weight("l2.weight", TensorDesc{dtype, Shape{32, 48}}), kNoValue, "l2");
  y = g.add(y, x, "residual");
  y = g.linear(y, g.weight("l3.weight", TensorDesc{dtype, Shape{40, 32}}), kNoValue, "l3");
  y = g.linear(y, g.weight("l4.weight", TensorDesc{dtype, Shape{16, 40}}), kNoValue, "l4");
  g.output(y, "y");
  return g;
}

TEST(PassFp8Linear, FastE4m3LinearsBecomeFp8Gemms) {
  const Graph g = fp8_graph(DType::F16);
  ASSERT_TRUE(g.ok()) << g.status().str();
  EXPECT_EQ(kinds(g)[OpKind::CAST], 4);  // one dequantizing CAST per stored weight
  Result<Graph> r = pass_fp8_linear(g);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR_FP8], 2);
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR], 2);
  // Two activation casts to e4m3, and the dequantizing CASTs of l3 and l4 only.
  EXPECT_EQ(kinds(*r)[OpKind::CAST], 4);
  const Node* l1 = node_named(*r, "l1");
  ASSERT_NE(l1, nullptr);
  ASSERT_EQ(l1->kind, OpKind::LINEAR_FP8);
  EXPECT_TRUE(l1->params.weight_scale);
  EXPECT_EQ(l1->params.dtype, DType::F16);
  ASSERT_EQ(l1->inputs.size(), 4u);  // x in e4m3, the stored weight, its scale, the bias
  EXPECT_EQ(r->desc(l1->inputs[0]).dtype, DType::F8_E4M3);
  EXPECT_EQ(r->value(l1->inputs[1]).kind, ValueKind::WEIGHT);
  EXPECT_EQ(r->desc(l1->inputs[1]).dtype, DType::F8_E4M3);
  EXPECT_EQ(r->value(l1->inputs[2]).name, "l1.scale_weight");
  const Node* l2 = node_named(*r, "l2");
  ASSERT_NE(l2, nullptr);
  EXPECT_EQ(l2->kind, OpKind::LINEAR_FP8);
  EXPECT_FALSE(l2->params.weight_scale);
  EXPECT_EQ(l2->inputs.size(), 2u);
  EXPECT_EQ(node_named(*r, "l3")->kind, OpKind::LINEAR);
  EXPECT_EQ(node_named(*r, "l4")->kind, OpKind::LINEAR);
  EXPECT_EQ(r->desc(r->outputs()[0]), g.desc(g.outputs()[0]));
}

TEST(PassFp8Linear, OnlyWhereTheBackendHasFp8GemmsAndForSixteenBitActivations) {
  Fp8Kernels k;
  EXPECT_TRUE(pass_options(fp8_graph(DType::F16), k).fp8_linear);
  k.fp8 = false;
  EXPECT_FALSE(pass_options(fp8_graph(DType::F16), k).fp8_linear);
  // f32 activations (the CPU's dtype, or a GPU run in f32) dequantize.
  Result<Graph> r = pass_fp8_linear(fp8_graph(DType::F32));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(kinds(*r)[OpKind::LINEAR_FP8], 0);
  // A graph without fast weights keeps no fp8 GEMM.
  Graph plain;
  const ValueId x = plain.input("x", TensorDesc{DType::F16, Shape{4, 32}});
  plain.output(plain.linear(x, plain.weight("w", TensorDesc{DType::F16, Shape{16, 32}})), "y");
  k.fp8 = true;
  EXPECT_FALSE(pass_options(plain, k).fp8_linear);
}

TEST(PassFp8Linear, FusionAddsTheResidualIntoTheFp8Gemm) {
  Fp8Kernels k;
  PassOptions o;
  o.fp8_linear = true;
  Result<Graph> r = graph_passes(fp8_graph(DType::F16), o, &k);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(kinds(*r)[OpKind::ADD], 0);
  int fused = 0;
  for (const Node& n : r->nodes())
    if (n.kind == OpKind::LINEAR_FP8 && n.params.add_input) ++fused;
  EXPECT_EQ(fused, 1);
}

}  // namespace
}  // namespace hr
