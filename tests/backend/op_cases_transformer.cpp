// Op-harness cases of the transformer ops RMS_NORM and ROPE at Flux / T5 / Qwen-like widths, and
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

}  // namespace
}  // namespace hr::test
