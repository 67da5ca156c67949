// Op-harness cases of the transformer ops RMS_NORM, ROPE and QKV_ROPE at Flux / T5 / Qwen-like widths, and
// their op_infer refusals.
#include <gtest/gtest.h>

#include "op_harness.h"

namespace hr::test {
namespace {

TensorDesc f32(Shape s) { return TensorDesc{DType::F32, s}; }

OpParams rms(float eps) {
  OpParams p;
  p.eps = eps;
  return p;
}

OpParams rope(bool half_split) {
  OpParams p;
  p.rope_half_split = half_split;
  return p;
}

OpParams qkv(int heads, int dim, bool half_split) {
  OpParams p = rope(half_split);
  p.heads = heads;
  p.dim = dim;
  p.eps = 1e-6f;
  return p;
}

}  // namespace

void add_transformer_cases(std::vector<OpCase>& v) {
  // RMS_NORM: inputs off-centre (a mean subtracted by mistake shows), weights near 1. Flux's
  // QK norm ([B, L, H, 128], eps 1e-6), T5's layer norm (wide rows), no weight, a width the
  // CUDA kernel's packs of four do not divide, and an eps as large as mean(x^2) so a wrong eps
  // moves the result by far more than the tolerance.
  auto norm = [&](std::string name, std::vector<TensorDesc> in, float eps, double lo = -1.0,
                  double hi = 3.0) {
    OpCase c = make_case(std::move(name), OpKind::RMS_NORM, std::move(in), rms(eps));
    c.with_range(0, lo, hi);
    if (c.inputs.size() > 1) c.with_range(1, 0.5, 1.5);
    v.push_back(std::move(c));
  };
  norm("rms_norm_qk_d128", {f32({2, 19, 3, 128}), f32({128})}, 1e-6f);
  norm("rms_norm_t5_c512", {f32({1, 9, 512}), f32({512})}, 1e-6f);
  norm("rms_norm_c4096", {f32({3, 4096}), f32({4096})}, 1e-6f);
  norm("rms_norm_noweight", {f32({3, 7, 64})}, 1e-6f);
  norm("rms_norm_c33", {f32({5, 33}), f32({33})}, 1e-5f);
  norm("rms_norm_large_eps", {f32({4, 96}), f32({96})}, 1e-2f, -0.2, 0.2);

  // ROPE: the table is f32 at every dtype under test (Note [dtype under test]: fixed), its
  // values random (the op is linear in x for any table; real tables are in the goldens).
  auto rot = [&](std::string name, Shape x, Shape cs, bool half_split) {
    OpCase c = make_case(std::move(name), OpKind::ROPE, {f32(x), f32(cs)}, rope(half_split));
    c.with_range(0, -2.0, 2.0).with_fixed(1);
    v.push_back(std::move(c));
  };
  rot("rope_interleaved_d128", {1, 40, 3, 128}, {40, 64, 2}, false);
  rot("rope_half_split_d64", {2, 17, 4, 64}, {17, 32, 2}, true);
  rot("rope_interleaved_per_batch", {2, 9, 2, 16}, {2, 9, 8, 2}, false);
  rot("rope_half_split_per_batch", {2, 5, 3, 24}, {2, 5, 12, 2}, true);
  rot("rope_interleaved_d6", {1, 7, 5, 6}, {7, 3, 2}, false);
  rot("rope_half_split_d6", {1, 7, 5, 6}, {7, 3, 2}, true);

  // QKV_ROPE: one stream (a single-stream block: x wider than 3C, the MLP's columns after q, k,
  // v) and two (a double-stream block: text then image tokens, each with its own norm weights),
  // interleaved and half-split pairs, a batch of two; the table last and f32.
  auto fused = [&](std::string name, std::vector<Shape> xs, int heads, int d, bool split) {
    std::vector<TensorDesc> in;
    int64_t len = 0;
    for (const Shape& x : xs) {
      in.insert(in.end(), {f32(x), f32({d}), f32({d})});
      len += x[1];
    }
    in.push_back(f32({len, d / 2, 2}));
    OpCase c = make_case(std::move(name), OpKind::QKV_ROPE, std::move(in), qkv(heads, d, split));
    for (size_t g = 0; g < xs.size(); ++g)
      c.with_range(3 * g, -1.0, 3.0).with_range(3 * g + 1, 0.5, 1.5).with_range(3 * g + 2, 0.5,
                                                                                  1.5);
    c.with_fixed(3 * xs.size());
    v.push_back(std::move(c));
  };
  fused("qkv_rope_single_d128", {{1, 21, 3 * 256 + 64}}, 2, 128, false);
  fused("qkv_rope_double_d64", {{2, 7, 3 * 192}, {2, 13, 3 * 192}}, 3, 64, false);
  fused("qkv_rope_double_half_split", {{1, 5, 3 * 96}, {1, 9, 3 * 96 + 32}}, 2, 48, true);
  fused("qkv_rope_d6", {{1, 4, 3 * 18}}, 3, 6, false);
}

namespace {

void expect_refused(OpKind kind, const OpParams& p, std::vector<TensorDesc> in) {
  Result<TensorDesc> r = op_infer(kind, p, in);
  ASSERT_FALSE(r.ok()) << op_name(kind) << " accepted bad inputs";
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT) << r.status().str();
  EXPECT_NE(r.status().message().find(op_name(kind)), std::string::npos) << r.status().str();
}

TEST(TransformerOpInfer, RmsNormChecksTheWeight) {
  expect_refused(OpKind::RMS_NORM, rms(1e-6f), {f32({2, 64}), f32({32})});
  expect_refused(OpKind::RMS_NORM, rms(1e-6f), {f32({2, 64}), f32({1, 64})});
  expect_refused(OpKind::RMS_NORM, rms(1e-6f),
                 {f32({2, 64}), TensorDesc{DType::F16, Shape{64}}});
  expect_refused(OpKind::RMS_NORM, rms(1e-6f), {f32({2, 64}), f32({64}), f32({64})});
  Result<TensorDesc> ok =
      op_infer(OpKind::RMS_NORM, rms(1e-6f), std::vector<TensorDesc>{f32({2, 3, 64})});
  ASSERT_TRUE(ok.ok()) << ok.status().str();
  EXPECT_EQ(ok->shape, (Shape{2, 3, 64}));
}

TEST(TransformerOpInfer, RopeChecksLayoutAndTable) {
  const TensorDesc bf16_x{DType::BF16, Shape{1, 8, 2, 16}};
  // The table stays f32 under a 16-bit x.
  Result<TensorDesc> ok =
      op_infer(OpKind::ROPE, rope(false), std::vector<TensorDesc>{bf16_x, f32({8, 8, 2})});
  ASSERT_TRUE(ok.ok()) << ok.status().str();
  EXPECT_EQ(*ok, bf16_x);
  expect_refused(OpKind::ROPE, rope(false), {bf16_x, TensorDesc{DType::BF16, Shape{8, 8, 2}}});
  expect_refused(OpKind::ROPE, rope(false), {f32({1, 8, 2, 15}), f32({8, 7, 2})});  // odd D
  expect_refused(OpKind::ROPE, rope(false), {f32({1, 8, 32}), f32({8, 16, 2})});    // not 4-d
  expect_refused(OpKind::ROPE, rope(false), {f32({1, 8, 2, 16}), f32({9, 8, 2})});   // L
  expect_refused(OpKind::ROPE, rope(false), {f32({1, 8, 2, 16}), f32({8, 16, 2})});  // D/2
  expect_refused(OpKind::ROPE, rope(false), {f32({1, 8, 2, 16}), f32({8, 8, 4})});   // (cos, sin)
  expect_refused(OpKind::ROPE, rope(true), {f32({2, 8, 2, 16}), f32({3, 8, 8, 2})});  // batch
  expect_refused(OpKind::ROPE, rope(true), {f32({2, 8, 2, 16})});                     // no table
}

TEST(TransformerOpInfer, QkvRopeChecksGroupsAndTable) {
  const OpParams p = qkv(2, 16, false);  // C = 32
  Result<TensorDesc> ok = op_infer(
      OpKind::QKV_ROPE, p,
      std::vector<TensorDesc>{f32({1, 3, 96}), f32({16}), f32({16}), f32({1, 5, 128}), f32({16}),
                              f32({16}), f32({8, 8, 2})});
  ASSERT_TRUE(ok.ok()) << ok.status().str();
  EXPECT_EQ(ok->shape, (Shape{1, 8, 96}));
  expect_refused(OpKind::QKV_ROPE, p, {f32({1, 3, 95}), f32({16}), f32({16}), f32({3, 8, 2})});
  expect_refused(OpKind::QKV_ROPE, p, {f32({1, 3, 96}), f32({16}), f32({3, 8, 2})});  // no gk
  expect_refused(OpKind::QKV_ROPE, p, {f32({1, 3, 96}), f32({8}), f32({16}), f32({3, 8, 2})});
  expect_refused(OpKind::QKV_ROPE, p, {f32({1, 3, 96}), f32({16}), f32({16}), f32({4, 8, 2})});
  expect_refused(OpKind::QKV_ROPE, p,
                 {f32({1, 3, 96}), f32({16}), f32({16}), f32({2, 3, 96}), f32({16}), f32({16}),
                  f32({6, 8, 2})});  // batches differ
  expect_refused(OpKind::QKV_ROPE, qkv(2, 15, false),
                 {f32({1, 3, 90}), f32({15}), f32({15}), f32({3, 7, 2})});  // odd D
  const TensorDesc half_x{DType::F16, Shape{1, 3, 96}}, half_w{DType::F16, Shape{16}};
  expect_refused(OpKind::QKV_ROPE, p, {half_x, f32({16}), half_w, f32({3, 8, 2})});
  expect_refused(OpKind::QKV_ROPE, p,
                 {half_x, half_w, half_w, TensorDesc{DType::F16, Shape{3, 8, 2}}});
}

}  // namespace
}  // namespace hr::test
