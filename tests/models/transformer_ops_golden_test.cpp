// RMS_NORM, ROPE and the RoPE tables (models/rope_table.h) on the CPU against ComfyUI's own
// rms_norm / T5LayerNorm, Flux's EmbedND + apply_rope and Llama's precompute_freqs_cis +
// apply_rope, on the small random inputs of tests/data/flux/ops_golden.safetensors (made by
// make_ops_golden.py there). The ops run as graphs (Graph::rms_norm, Graph::rope) through the
// executor, with ComfyUI's [B, H, L, D] tensors permuted to ROPE's [B, L, H, D] in the graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "models/rope_table.h"
#include "models/safetensors.h"
#include "test_paths.h"

namespace hr {
namespace {

// The graphs here take everything as inputs.
class NoWeights final : public WeightSource {
 public:
  Result<TensorRef> weight_get(const std::string& name, const TensorDesc&, WeightLayout) override {
    return make_error(ErrorCode::NOT_FOUND, "no weight '{}' in this test", name);
  }
};

struct Golden {
  std::unique_ptr<SafetensorsFile> file;
  HostTensor get(const std::string& name) const {
    Result<HostTensor> t = file->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }
};

const Golden& golden() {
  static const Golden g = [] {
    Golden x;
    auto f = SafetensorsFile::open(test::data_path("flux/ops_golden.safetensors"));
    EXPECT_TRUE(f.ok()) << f.status().str();
    if (f.ok()) x.file = std::move(f).value();
    return x;
  }();
  return g;
}

// max |got - want| / max |want| (the harness's relative max error) and the share of elements
// equal bit for bit.
struct Diff {
  double rel_max = 0.0;
  double exact = 0.0;
};
Diff diff(const HostTensor& got, const HostTensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  Diff d;
  if (got.shape() != want.shape() || want.numel() == 0) return d;
  double worst = 0.0, ref = 0.0;
  int64_t same = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float a = got.f32()[i], b = want.f32()[i];
    worst = std::max(worst, std::fabs(double(a) - double(b)));
    ref = std::max(ref, std::fabs(double(b)));
    same += std::memcmp(&a, &b, sizeof a) == 0;
  }
  d.rel_max = ref > 0 ? worst / ref : worst;
  d.exact = double(same) / double(want.numel());
  return d;
}

class TransformerOpsGolden : public ::testing::Test {
 protected:
  // Runs g (inputs by name) on the CPU and returns its one output.
  HostTensor run(const Graph& g, const std::map<std::string, const HostTensor*>& in) {
    EXPECT_TRUE(g.ok()) << g.status().str();
    HostInputs inputs(in.begin(), in.end());
    Result<std::vector<HostTensor>> out = ex_.run(g, inputs, none_);
    EXPECT_TRUE(out.ok()) << out.status().str();
    if (!out.ok() || out->size() != 1) return HostTensor();
    return std::move((*out)[0]);
  }

  // ROPE of ComfyUI's q [B, H, L, D] by `table`: permuted to [B, L, H, D] and back in the graph.
  HostTensor rope_run(const HostTensor& q, const HostTensor& table, bool half_split) {
    Graph g;
    ValueId x = g.input("q", q.desc());
    ValueId cs = g.input("cs", table.desc());
    ValueId t = g.permute(x, {0, 2, 1, 3}, "to_blhd");
    ValueId r = g.rope(t, cs, half_split, "rope");
    g.output(g.permute(r, {0, 2, 1, 3}, "to_bhld"), "out");
    return run(g, {{"q", &q}, {"cs", &table}});
  }

  HostTensor rms_run(const HostTensor& x, const HostTensor* w, float eps) {
    Graph g;
    ValueId xi = g.input("x", x.desc());
    ValueId wi = w ? g.input("w", w->desc()) : kNoValue;
    g.output(g.rms_norm(xi, wi, eps, "rms"), "out");
    std::map<std::string, const HostTensor*> in{{"x", &x}};
    if (w) in["w"] = w;
    return run(g, in);
  }

  std::unique_ptr<Backend> cpu_ = cpu_backend_create(1);
  Allocator alloc_{*cpu_};
  Executor ex_{*cpu_, alloc_, executor_policies_default(*cpu_)};
  NoWeights none_;
};

// Note [rms norm rounding]: the f32 products round as ComfyUI's; only the sum of squares (double
// here, torch's f32 reduction there) differs, by a few ulp at most.
TEST_F(TransformerOpsGolden, RmsNormMatchesComfyUI) {
  ASSERT_TRUE(golden().file);
  for (const char* c : {"rms_qk", "rms_t5"}) {
    HostTensor x = golden().get(std::string(c) + ".x");
    HostTensor w = golden().get(std::string(c) + ".weight");
    const Diff d = diff(rms_run(x, &w, 1e-6f), golden().get(std::string(c) + ".out"));
    EXPECT_LE(d.rel_max, 1e-6) << c;
    std::cout << "  " << c << ": rel max " << d.rel_max << ", " << d.exact * 100
              << "% bit-equal\n";
  }
  HostTensor x = golden().get("rms_noweight.x");
  const Diff d = diff(rms_run(x, nullptr, 1e-6f), golden().get("rms_noweight.out"));
  EXPECT_LE(d.rel_max, 1e-6);
}

// Note [rope tables]: Flux's table from its ids, against EmbedND's rotation matrices
// [[cos, -sin], [sin, cos]] (pe [1, 1, N, 64, 2, 2]).
TEST_F(TransformerOpsGolden, FluxTableMatchesEmbedND) {
  ASSERT_TRUE(golden().file);
  HostTensor ids = golden().get("flux_rope.ids");  // [1, N, 3]
  HostTensor pe = golden().get("flux_rope.pe");
  const int64_t n = ids.shape()[1];
  const int axes[] = {16, 56, 56};
  Result<HostTensor> table =
      rope_table_flux(std::span<const float>(ids.f32(), size_t(ids.numel())), axes, 10000.0);
  ASSERT_TRUE(table.ok()) << table.status().str();
  ASSERT_EQ(table->shape(), (Shape{n, 64, 2}));
  HostTensor want(DType::F32, Shape{n, 64, 2});
  for (int64_t i = 0; i < n * 64; ++i) {
    want.f32()[2 * i] = pe.f32()[4 * i];          // [0][0]: cos
    want.f32()[2 * i + 1] = pe.f32()[4 * i + 2];  // [1][0]: sin
  }
  // float64 throughout, then one rounding: at most one f32 ulp apart where torch's float64 cos,
  // sin or linspace differ from the C library's in the last bit.
  const Diff d = diff(*table, want);
  EXPECT_LE(d.rel_max, 6e-8);
  EXPECT_GE(d.exact, 0.99);
  std::cout << "  rel max " << d.rel_max << ", " << d.exact * 100 << "% bit-equal\n";
}

// Note [rope arithmetic]: ROPE with EmbedND's own table reproduces the rotation in Flux's
// attention() bit for bit (the same f32 products and sums); with rope_table_flux's table, within
// the table's ulp.
TEST_F(TransformerOpsGolden, FluxRopeMatchesApplyRope) {
  ASSERT_TRUE(golden().file);
  HostTensor ids = golden().get("flux_rope.ids");
  HostTensor pe = golden().get("flux_rope.pe");
  const int64_t n = ids.shape()[1];
  HostTensor from_pe(DType::F32, Shape{n, 64, 2});
  for (int64_t i = 0; i < n * 64; ++i) {
    from_pe.f32()[2 * i] = pe.f32()[4 * i];
    from_pe.f32()[2 * i + 1] = pe.f32()[4 * i + 2];
  }
  const int axes[] = {16, 56, 56};
  Result<HostTensor> ours =
      rope_table_flux(std::span<const float>(ids.f32(), size_t(ids.numel())), axes, 10000.0);
  ASSERT_TRUE(ours.ok()) << ours.status().str();
  for (const char* c : {"q", "k"}) {
    HostTensor x = golden().get(std::string("flux_rope.") + c);
    HostTensor want = golden().get(std::string("flux_rope.") + c + "_out");
    const Diff exact = diff(rope_run(x, from_pe, false), want);
    EXPECT_EQ(exact.exact, 1.0) << c << ": rel max " << exact.rel_max;
    const Diff d = diff(rope_run(x, *ours, false), want);
    EXPECT_LE(d.rel_max, 1e-6) << c;
    // apply_rope1's fused multiply-add rounds once less.
    const Diff fused =
        diff(rope_run(x, from_pe, false), golden().get(std::string("flux_rope.") + c + "_apply_rope"));
    EXPECT_LE(fused.rel_max, 1e-6) << c;
    std::cout << "  " << c << ": with EmbedND's table " << exact.exact * 100
              << "% bit-equal to attention(); with rope_table_flux rel max " << d.rel_max
              << "; apply_rope rel max " << fused.rel_max << "\n";
  }
}

// Half-split pairs: Llama/Qwen's precompute_freqs_cis and apply_rope (theta 1e6, head dim 32).
TEST_F(TransformerOpsGolden, LlamaRopeMatchesApplyRope) {
  ASSERT_TRUE(golden().file);
  HostTensor pos = golden().get("llama_rope.positions");  // [1, N]
  HostTensor cos = golden().get("llama_rope.cos");        // [1, 1, N, D]
  HostTensor sin = golden().get("llama_rope.sin");
  const int64_t n = pos.shape()[1], d = cos.shape()[3], half = d / 2;
  HostTensor from_ref(DType::F32, Shape{n, half, 2});
  for (int64_t l = 0; l < n; ++l)
    for (int64_t p = 0; p < half; ++p) {
      // The reference repeats the angles per half (cat(freqs, freqs)).
      ASSERT_EQ(cos.f32()[l * d + p], cos.f32()[l * d + p + half]);
      from_ref.f32()[(l * half + p) * 2] = cos.f32()[l * d + p];
      from_ref.f32()[(l * half + p) * 2 + 1] = sin.f32()[l * d + p];
    }
  Result<HostTensor> ours = rope_table_llama(
      std::span<const float>(pos.f32(), size_t(pos.numel())), int(d), 1000000.0f);
  ASSERT_TRUE(ours.ok()) << ours.status().str();
  const Diff t = diff(*ours, from_ref);
  EXPECT_LE(t.rel_max, 3e-7);  // f32 pow / cos / sin: a few ulp of f32 apart at most
  std::cout << "  table: rel max " << t.rel_max << ", " << t.exact * 100 << "% bit-equal\n";
  for (const char* c : {"q", "k"}) {
    HostTensor x = golden().get(std::string("llama_rope.") + c);
    HostTensor want = golden().get(std::string("llama_rope.") + c + "_out");
    const Diff exact = diff(rope_run(x, from_ref, true), want);
    EXPECT_EQ(exact.exact, 1.0) << c << ": rel max " << exact.rel_max;
    const Diff e = diff(rope_run(x, *ours, true), want);
    EXPECT_LE(e.rel_max, 1e-6) << c;
  }
}

TEST(RopeTable, RefusesBadArguments) {
  const float ids[] = {0, 1, 2, 3, 4};
  const int odd[] = {16, 55, 56};
  EXPECT_FALSE(rope_table_flux(ids, odd, 10000.0).ok());
  const int three[] = {16, 56, 56};
  EXPECT_FALSE(rope_table_flux(ids, three, 10000.0).ok());  // 5 ids are not rows of 3
  EXPECT_FALSE(rope_table_llama(ids, 31, 1e6f).ok());
}

}  // namespace
}  // namespace hr
