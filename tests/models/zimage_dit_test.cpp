// The Z-Image DiT (models/zimage/) on the CPU against diffusers' ZImageTransformer2DModel on a tiny
// random configuration (tests/data/zimage/dit_golden.safetensors, made by make_dit_golden.py
// there): configuration detection, patchify, the position ids, the output of
// whole calls, and the refusal of a file with a tensor missing or of the wrong shape.
#include "models/zimage/zimage_dit.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "memory/executor_policies.h"
#include "memory/weight_set.h"
#include "models/rope_table.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "models/zimage/zimage_config.h"
#include "models/zimage/zimage_tokens.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
const std::vector<int> kAxes = {8, 4, 4};  // make_dit_golden.py's axes_dims (head dim 16)

class ZImageDitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::open(test::data_path("zimage/dit_golden.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status().str();
    file_ = std::move(f).value();
    cpu_ = cpu_backend_create(1);
    alloc_ = std::make_unique<Allocator>(*cpu_);
    ex_ = std::make_unique<Executor>(*cpu_, *alloc_, executor_policies_default(*cpu_));
  }
  HostTensor get(const std::string& name) const {
    Result<HostTensor> t = file_->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }
  ZImageConfig config() const {
    Result<ZImageConfig> c = zimage_config_detect(*file_, "");
    EXPECT_TRUE(c.ok()) << c.status().str();
    ZImageConfig cfg = c.ok() ? *c : ZImageConfig{};
    cfg.axes_dim = kAxes;
    return cfg;
  }
  // Runs one call and returns its relative error against `ref`.
  double case_error(const ZImageConfig& cfg, WeightSet& w, const HostTensor& x,
                    const HostTensor& sigma, const HostTensor& ctx, const HostTensor& ref) {
    ZImageInputs in{&x, &sigma, &ctx};
    Result<HostTensor> out = zimage_dit_run(*ex_, cfg, w, DType::F32, in);
    EXPECT_TRUE(out.ok()) << out.status().str();
    if (!out.ok()) return 1.0;
    EXPECT_EQ(out->shape(), ref.shape());
    return test::rel_err(*out, ref);
  }

  std::unique_ptr<SafetensorsFile> file_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(ZImageDitTest, DetectsTheTinyConfig) {
  Result<ZImageConfig> c = zimage_config_detect(*file_, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_EQ(c->in_channels, 16);
  EXPECT_EQ(c->dim, 32);
  EXPECT_EQ(c->n_heads, 2);
  EXPECT_EQ(c->n_layers, 2);
  EXPECT_EQ(c->n_refiner_layers, 1);
  EXPECT_EQ(c->cap_feat_dim, 24);
  EXPECT_EQ(c->adaln_dim, 32);   // min(dim, 256)
  EXPECT_EQ(c->t_hidden, 32);    // the golden's shrunk timestep MLP
  EXPECT_EQ(c->ffn_hidden, 85);  // int(32 / 3 * 8)
  EXPECT_TRUE(c->axes_dim.empty()) << "head dim 16 is not Z-Image's 128: " << c->str();
  EXPECT_EQ(c->rope_theta, 256.0);
  EXPECT_EQ(c->t_scale, 1000.0f);
}

TEST(ZImageConfig, TurboValues) {
  // diffusers ZImageTransformer2DModel defaults (Z-Image Turbo's config).
  ZImageConfig c = zimage_config_turbo();
  EXPECT_EQ(c.dim, 3840);
  EXPECT_EQ(c.n_heads, 30);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_refiner_layers, 2);
  EXPECT_EQ(c.cap_feat_dim, 2560);
  EXPECT_EQ(c.ffn_hidden, int(3840.0 / 3 * 8));
  EXPECT_EQ(c.axes_dim, (std::vector<int>{32, 48, 48}));
  EXPECT_EQ(c.rope_theta, 256.0);
}

// The Turbo preset declares exactly the tensors of the full-size model in ComfyUI's layout: their
// counts ("N tensors M" elements; 6.15 B parameters), from diffusers' class built on the meta
// device, are in the golden's metadata (make_dit_golden.py full_size_counts).
TEST_F(ZImageDitTest, TurboPresetMatchesTheReferenceStateDict) {
  // 63 x 63 image tokens and 100 caption tokens: both sequences need their pad token.
  Result<Graph> g = zimage_dit_graph(zimage_config_turbo(), 1, 63, 63, 100, DType::BF16);
  ASSERT_TRUE(g.ok()) << g.status().str();
  int64_t tensors = 0;
  for (const Value& v : g->values()) tensors += v.kind == ValueKind::WEIGHT;
  const std::string got = fmt::format("{} tensors {}", tensors, g->weight_bytes() / 2);
  auto it = file_->metadata().find("full_size.turbo");
  ASSERT_NE(it, file_->metadata().end());
  EXPECT_EQ(got, it->second);
}

TEST(ZImageTokens, PatchLayoutIsChannelLastAndRoundTrips) {
  HostTensor x(DType::F32, Shape{2, 3, 4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i);
  Result<HostTensor> t = zimage_patchify(x);
  ASSERT_TRUE(t.ok()) << t.status().str();
  ASSERT_EQ(t->shape(), (Shape{2, 6, 12}));
  // diffusers _patchify_image: token (ty, tx), column (py * 2 + px) * C + c holds
  // x[c, 2 ty + py, 2 tx + px]. Sample 1, token (1, 2), py 1, px 0, channel 2:
  const int64_t token = 1 * 3 + 2, col = (1 * 2 + 0) * 3 + 2;
  EXPECT_EQ(t->f32()[(1 * 6 + token) * 12 + col], x.f32()[((1 * 3 + 2) * 4 + 3) * 6 + 4]);
  Result<HostTensor> back = zimage_unpatchify(*t, 3, 2, 3);
  ASSERT_TRUE(back.ok()) << back.status().str();
  EXPECT_EQ(std::memcmp(back->data(), x.data(), x.bytes()), 0);
  EXPECT_FALSE(zimage_unpatchify(*t, 3, 3, 3).ok());
  // An odd size is padded circularly (ComfyUI's pad_to_patch_size): the extra column of a 4 x 5
  // latent repeats column 0.
  HostTensor odd(DType::F32, Shape{1, 1, 4, 5});
  for (int64_t i = 0; i < odd.numel(); ++i) odd.f32()[i] = float(i);
  Result<HostTensor> p = zimage_patchify(odd);
  ASSERT_TRUE(p.ok()) << p.status().str();
  ASSERT_EQ(p->shape(), (Shape{1, 6, 4}));
  // token (0, 2), px 1 (column 5 -> 0), py 0: x[0, 0, 0].
  EXPECT_EQ(p->f32()[2 * 4 + 1], odd.f32()[0]);
}

// The ids of Note [z-image positions] (diffusers' patchify_and_embed printed them for 7 caption
// tokens and a 3 x 5 image: caption rows 1..32, image (33, r, c), 17 image pads at 0), written
// out small: 3 caption tokens and a 2 x 1 image with a pad multiple of 4 (Lc = 4, Li = 4).
TEST(ZImageTokens, PositionIds) {
  const std::vector<int> axes = {4, 2, 2};
  const std::vector<float> ids = {1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0,   // caption + its pad
                                  5, 0, 0, 5, 1, 0, 0, 0, 0, 0, 0, 0};  // image + 2 pads
  Result<HostTensor> pe = zimage_pe_table(3, 2, 1, 4, axes, 256.0);
  ASSERT_TRUE(pe.ok()) << pe.status().str();
  Result<HostTensor> want = rope_table_flux(ids, axes, 256.0);
  ASSERT_TRUE(want.ok()) << want.status().str();
  ASSERT_EQ(pe->shape(), want->shape());
  EXPECT_EQ(std::memcmp(pe->data(), want->data(), want->bytes()), 0);
  EXPECT_EQ(zimage_padded_len(37, 32), 64);
  EXPECT_EQ(zimage_padded_len(32, 32), 32);
}

TEST_F(ZImageDitTest, MatchesDiffusers) {
  ZImageConfig cfg = config();
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, *file_, "", DType::F32).ok());
  // As built, and through the passes GPUs get (fusion, stacked projections; graph/passes.h).
  const char* kModes[] = {"", " (fused)", " (fused, stacked)", " (fused, stacked Q/K/V)"};
  for (const char* name : {"a", "b"}) {
    const std::string p = std::string("golden.") + name;
    HostTensor x = get(p + ".x"), sigma = get(p + ".sigma"), ctx = get(p + ".context");
    HostTensor ref = get(p + ".out");
    for (int mode : {0, 1, 2, 3}) {
      ex_->set_pass_options(
          mode == 0 ? std::nullopt
                    : std::optional<PassOptions>(PassOptions{false, true, mode >= 2, mode == 3}));
      const double err = case_error(cfg, w, x, sigma, ctx, ref);
      std::printf("zimage dit case %s%s rel error %.3g\n", name, kModes[mode], err);
      EXPECT_LT(err, kRelTol) << "case " << name << kModes[mode];
    }
  }
}

// Sample `i` of a batched f32 tensor, as a batch of one.
HostTensor sample_of(const HostTensor& t, int64_t i) {
  Shape s = t.shape();
  const int64_t n = t.numel() / s[0];
  s[0] = 1;
  HostTensor out(DType::F32, s);
  std::memcpy(out.f32(), t.f32() + i * n, size_t(n) * sizeof(float));
  return out;
}

// One sample at a time the modulation folds into the norms' weights (Note [one-sample
// modulation]); each output is its row of the batched reference.
TEST_F(ZImageDitTest, EachSampleAloneMatchesItsRow) {
  ZImageConfig cfg = config();
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, *file_, "", DType::F32).ok());
  for (int64_t i = 0; i < 2; ++i) {
    HostTensor x = sample_of(get("golden.b.x"), i), sigma = sample_of(get("golden.b.sigma"), i);
    HostTensor ctx = sample_of(get("golden.b.context"), i);
    const double err = case_error(cfg, w, x, sigma, ctx, sample_of(get("golden.b.out"), i));
    std::printf("zimage dit case b sample %lld alone rel error %.3g\n", (long long)i, err);
    EXPECT_LT(err, kRelTol);
  }
}

// The golden's weights under `prefix`, with `drop` left out and `reshape` (if named) stored
// transposed, detected from a temporary file.
Result<ZImageConfig> detect_edited(const SafetensorsFile& file, const std::string& prefix,
                                   const std::string& drop, const std::string& transpose) {
  std::vector<HostTensor> keep;
  keep.reserve(file.entries().size());
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name == drop || e.name.rfind("golden.", 0) == 0) continue;
    Result<HostTensor> t = file.load(e.name, DType::F32);
    if (!t.ok()) return t.status();
    HostTensor v = std::move(t).value();
    if (e.name == transpose) {
      const Shape& s = v.shape();
      HostTensor tr(DType::F32, Shape{s[1], s[0]});
      for (int64_t r = 0; r < s[0]; ++r)
        for (int64_t c = 0; c < s[1]; ++c) tr.f32()[c * s[0] + r] = v.f32()[r * s[1] + c];
      v = std::move(tr);
    }
    keep.push_back(std::move(v));
    tensors.push_back({prefix + e.name, &keep.back()});
  }
  fs::path path = fs::temp_directory_path() /
                  ("hr_zimage_dit_test_" + std::to_string(getpid()) + ".safetensors");
  HR_TRY(safetensors_write(path.string(), tensors));
  auto f = SafetensorsFile::open(path.string());
  fs::remove(path);
  if (!f.ok()) return f.status();
  return zimage_config_detect(**f, prefix);
}

TEST_F(ZImageDitTest, DetectsUnderACheckpointPrefix) {
  Result<ZImageConfig> c = detect_edited(*file_, "model.diffusion_model.", "", "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_EQ(c->dim, 32);
  EXPECT_EQ(c->n_layers, 2);
}

TEST_F(ZImageDitTest, RefusesAWrongShapeNamingIt) {
  const std::string key = "layers.1.feed_forward.w2.weight";  // [32, 85] stored as [85, 32]
  Result<ZImageConfig> c = detect_edited(*file_, "", "", key);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::CORRUPT);
  EXPECT_NE(c.status().str().find(key), std::string::npos) << c.status().str();
}

TEST_F(ZImageDitTest, RefusesAMissingTensorNamingIt) {
  for (const std::string key : {"x_pad_token", "context_refiner.0.ffn_norm2.weight",
                                "noise_refiner.0.adaLN_modulation.0.bias"}) {
    Result<ZImageConfig> c = detect_edited(*file_, "", key, "");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().str().find(key), std::string::npos) << c.status().str();
  }
}

}  // namespace
}  // namespace hr
