// The 16-channel Flux.1 autoencoder through the SD VAE code (Note [flux vae]): a bare
// ae.safetensors and one under a single-file checkpoint's "vae." prefix load through
// checkpoint_inspect and the autoencoder factory; decode and encode match ComfyUI's own VAE
// class (tests/data/flux/vae_golden.safetensors, README "Flux VAE reference"); tiled and
// automatically tiled runs stay close to the untiled one; latents of the wrong width are refused
// naming both channel counts; make_flux_vae writes ComfyUI's full-size layout.
#include "models/flux/flux_vae_make.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_vae.h"
#include "models/sd/vae_tiled.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// Note [golden tolerance] (unet_test.cpp): float32 rounding differences between torch and the
// CPU backend; 1e-4 relative L2 as for the SD VAE (vae_test.cpp).
constexpr double kRelTol = 1e-4;
// Note [tiled tolerance] in vae_tiled_test.cpp: tiles normalise and attend on their own.
constexpr double kTiledRelTol = 0.35;

std::string ae_path() { return test::data_path("flux/tiny_flux_ae.safetensors"); }

HostTensor randn(Shape s, uint32_t seed) {
  HostTensor t(DType::F32, s);
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(gen);
  return t;
}

// The golden's NHWC pixels in [0, 1], centre-cropped to multiples of 4 (VAE.encode's
// vae_encode_crop_pixels at the tiny VAE's downscale ratio) as NCHW in [-1, 1].
HostTensor comfy_encode_input(const HostTensor& px, int64_t down) {
  const Shape& s = px.shape();
  const int64_t h = s[1] / down * down, w = s[2] / down * down;
  const int64_t oy = (s[1] % down) / 2, ox = (s[2] % down) / 2;
  HostTensor img(DType::F32, Shape{s[0], 3, h, w});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          img.f32()[((b * 3 + c) * h + y) * w + x] =
              px.f32()[((b * s[1] + y + oy) * s[2] + x + ox) * 3 + c] * 2.0f - 1.0f;
  return img;
}

// A copy of the tensors of `src` in f32, renamed "<prefix><name>", plus `extra` tensors.
void write_renamed(const SafetensorsFile& src, const std::string& prefix, const std::string& path,
                   std::vector<std::pair<std::string, HostTensor>> extra = {}) {
  std::vector<std::pair<std::string, HostTensor>> held;
  for (const SafetensorsEntry& e : src.entries()) {
    auto t = src.load(e.name, DType::F32);
    ASSERT_TRUE(t.ok()) << t.status().str();
    held.emplace_back(prefix + e.name, std::move(t).value());
  }
  for (auto& x : extra) held.push_back(std::move(x));
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (const auto& [name, t] : held) list.emplace_back(name, &t);
  ASSERT_TRUE(safetensors_write(path, list).ok());
}

class FluxVAETest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = cpu_backend_create(1);  // one thread: tiny ops, shared 2-core machines
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
    auto g = SafetensorsFile::open(test::data_path("flux/vae_golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    gold_ = std::move(g).value();
    model_ = load(ae_path());
    ASSERT_TRUE(model_ && model_->vae);
    tmp_ = fs::temp_directory_path() / ("hr-flux-vae-" + std::to_string(std::random_device{}()));
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  std::unique_ptr<LoadedModel> load(const std::string& path) {
    LoadOptions o;
    o.load_diffusion = false;
    auto m = model_load(path, o);
    EXPECT_TRUE(m.ok()) << m.status().str();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  HostTensor golden(const std::string& name) {
    auto t = gold_->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  SDVAE& vae() { return *sd_vae(*model_); }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<SafetensorsFile> gold_;
  std::unique_ptr<LoadedModel> model_;
  fs::path tmp_;
};

// The bare file is a VAE alone: no family (as ComfyUI's VAELoader takes it), 16 latent
// channels, no quant convs, the three-level downscale of 4.
TEST_F(FluxVAETest, BareFileLoadsAsA16ChannelVAE) {
  const CheckpointInfo& info = model_->info;
  EXPECT_TRUE(info.has_vae);
  EXPECT_EQ(info.vae_prefix, "");
  EXPECT_FALSE(info.has_diffusion);
  EXPECT_FALSE(info.family_known);
  EXPECT_EQ(info.family_name(), "unknown");
  VAEConfig want;
  want.ch = 32;
  want.ch_mult = {1, 1, 1};
  want.num_res_blocks = 1;
  want.z_channels = 16;
  want.embed_dim = 16;
  want.use_quant_conv = false;
  EXPECT_EQ(vae().config, want) << vae().config.str();
  EXPECT_EQ(model_->vae->latent_channels(), 16);
  EXPECT_EQ(model_->vae->downscale(), 4);
}

TEST_F(FluxVAETest, DecodeMatchesComfyUI) {
  HostTensor latent = golden("decode.latent"), raw = golden("decode.raw");
  auto whole = vae_decode(*ex_, vae(), latent);
  ASSERT_TRUE(whole.ok()) << whole.status().str();
  const double rel = test::rel_err(*whole, raw);
  std::printf("  decode vs ComfyUI: rel L2 %.3g\n", rel);
  EXPECT_LE(rel, kRelTol);
  // The component's own entry (the VAEDecode node's) decides WHOLE and gives the same numbers.
  auto d = model_->vae->decode(*ex_, latent);
  ASSERT_TRUE(d.ok()) << d.status().str();
  EXPECT_EQ(d->decision.mode, VAEMode::WHOLE) << d->decision.reason;
  EXPECT_LE(test::rel_err(d->image, raw), kRelTol);
}

TEST_F(FluxVAETest, EncodeMatchesComfyUI) {
  HostTensor img = comfy_encode_input(golden("encode.pixels"), 4);
  auto e = model_->vae->encode(*ex_, img);
  ASSERT_TRUE(e.ok()) << e.status().str();
  EXPECT_EQ(e->decision.mode, VAEMode::WHOLE) << e->decision.reason;
  const double rel = test::rel_err(e->moments.mean, golden("encode.latent"));
  std::printf("  encode mean vs ComfyUI: rel L2 %.3g\n", rel);
  EXPECT_LE(rel, kRelTol);
  // The encoder's 32 moments: mean then logvar (DiagonalGaussianDistribution clamps logvar to
  // [-30, 20]; the tiny weights stay inside).
  HostTensor moments = golden("encode.moments");
  const Shape& s = moments.shape();
  ASSERT_EQ(s[1], 32);
  HostTensor logvar(DType::F32, Shape{s[0], 16, s[2], s[3]});
  const int64_t n = 16 * s[2] * s[3];
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < n; ++i) logvar.f32()[b * n + i] = moments.f32()[(2 * b + 1) * n + i];
  EXPECT_LE(test::rel_err(e->moments.logvar, logvar), kRelTol);
}

// fp8 weights are widened exactly at load, so the golden's fp8 file and an f32 copy of it (the
// dtype BFL publishes) decode alike.
TEST_F(FluxVAETest, F32CopyDecodesTheSame) {
  auto src = SafetensorsFile::open(ae_path());
  ASSERT_TRUE(src.ok());
  const std::string path = (tmp_ / "ae.safetensors").string();
  write_renamed(**src, "", path);
  auto m = load(path);
  ASSERT_TRUE(m && m->vae);
  HostTensor latent = golden("decode.latent");
  auto a = vae_decode(*ex_, vae(), latent);
  auto b = vae_decode(*ex_, *sd_vae(*m), latent);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(test::rel_err(*a, *b), 0.0);
}

// A single-file checkpoint keeps the VAE under "vae." (ComfyUI's Flux vae_key_prefix). The
// factory loads it from whatever prefix the family's detection reports; a family registered here
// stands in for the Flux family's detection.
TEST_F(FluxVAETest, LoadsUnderTheSingleFilePrefix) {
  ModelFamily fam;
  fam.name = "flux-vae-prefix-test";
  fam.display_name = "Flux VAE prefix test";
  fam.detect = [](const SafetensorsFile& f) -> std::optional<FamilyMatch> {
    if (!f.contains(std::string(kFluxVAEPrefix) + "decoder.conv_in.weight")) return std::nullopt;
    FamilyMatch m;
    m.vae_prefix = kFluxVAEPrefix;
    return m;
  };
  fam.autoencoder_create = sd_vae_create;
  ASSERT_TRUE(model_family_register(fam).ok());
  auto src = SafetensorsFile::open(ae_path());
  ASSERT_TRUE(src.ok());
  const std::string path = (tmp_ / "flux1-all.safetensors").string();
  std::vector<std::pair<std::string, HostTensor>> other;
  other.emplace_back("model.diffusion_model.img_in.weight", HostTensor(DType::F32, Shape{4, 4}));
  write_renamed(**src, kFluxVAEPrefix, path, std::move(other));
  auto m = load(path);
  model_family_unregister(fam.name);
  ASSERT_TRUE(m && m->vae);
  EXPECT_EQ(m->info.vae_prefix, "vae.");
  EXPECT_EQ(sd_vae(*m)->config, vae().config);
  auto d = vae_decode(*ex_, *sd_vae(*m), golden("decode.latent"));
  ASSERT_TRUE(d.ok()) << d.status().str();
  EXPECT_LE(test::rel_err(*d, golden("decode.raw")), kRelTol);
}

// ComfyUI's VAEDecodeTiled (three tilings averaged) and the automatic tiling under a budget
// too small for the untiled arena, on a 16-channel latent.
TEST_F(FluxVAETest, TiledDecodeStaysCloseToUntiled) {
  HostTensor z = randn(Shape{1, 16, 24, 32}, 39);
  auto whole = vae_decode(*ex_, vae(), z);
  ASSERT_TRUE(whole.ok()) << whole.status().str();
  auto tiled = vae_decode_tiled(*ex_, vae(), z, VAETileOptions{64, 16, {}});
  ASSERT_TRUE(tiled.ok()) << tiled.status().str();
  const double rel_tiled = test::rel_err(*tiled, *whole);

  auto plan = vae_decode_decide(*ex_, vae(), z.shape());
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  ASSERT_EQ(plan->mode, VAEMode::WHOLE);
  ex_->release_arena();
  alloc_->set_budget(plan->arena_bytes * 9 / 10 + vae().store.device_bytes());
  alloc_->reset_peak();
  auto r = model_->vae->decode(*ex_, z);
  ASSERT_TRUE(r.ok()) << r.status().str();
  ASSERT_EQ(r->decision.mode, VAEMode::TILED) << r->decision.reason;
  EXPECT_LE(alloc_->total().peak, alloc_->budget());
  const double rel_auto = test::rel_err(r->image, *whole);
  std::printf("  VAEDecodeTiled 64/16 px: rel L2 %.3g; %s: rel L2 %.3g\n", rel_tiled,
              r->decision.reason.c_str(), rel_auto);
  EXPECT_LE(rel_tiled, kTiledRelTol);
  EXPECT_LE(rel_auto, kTiledRelTol);
}

// The encoder's 32 moments blend across tiles like SD's 8 (encode_joined), under a budget too
// small for the untiled arena.
TEST_F(FluxVAETest, TiledEncodeStaysCloseToUntiled) {
  HostTensor img = randn(Shape{1, 3, 96, 128}, 40);
  auto whole = vae_encode(*ex_, vae(), img);
  ASSERT_TRUE(whole.ok()) << whole.status().str();
  auto plan = vae_encode_decide(*ex_, vae(), img.shape());
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  ASSERT_EQ(plan->mode, VAEMode::WHOLE);
  ex_->release_arena();
  alloc_->set_budget(plan->arena_bytes * 9 / 10 + vae().store.device_bytes());
  alloc_->reset_peak();
  auto r = model_->vae->encode(*ex_, img);
  ASSERT_TRUE(r.ok()) << r.status().str();
  ASSERT_EQ(r->decision.mode, VAEMode::TILED) << r->decision.reason;
  EXPECT_LE(alloc_->total().peak, alloc_->budget());
  ASSERT_EQ(r->moments.mean.shape(), (Shape{1, 16, 24, 32}));
  const double rel = test::rel_err(r->moments.mean, whole->mean);
  std::printf("  %s: mean rel L2 %.3g\n", r->decision.reason.c_str(), rel);
  EXPECT_LE(rel, kTiledRelTol);
  EXPECT_LE(test::rel_err(r->moments.logvar, whole->logvar), kTiledRelTol);
}

// Note [vae channels]: a Flux latent given to an SD VAE and an SD latent given to the Flux VAE
// are refused, by every entry, naming both channel counts.
TEST_F(FluxVAETest, LatentOfAnotherWidthIsRefused) {
  auto sd = load(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(sd && sd->vae);
  struct Case {
    LoadedModel* model;
    int64_t channels;
    const char* message;
  };
  for (const Case& c : {Case{sd.get(), 16, "the latent has 16 channels but this VAE takes "
                                           "4-channel latents"},
                        Case{model_.get(), 4, "the latent has 4 channels but this VAE takes "
                                              "16-channel latents"}}) {
    HostTensor z = randn(Shape{1, c.channels, 4, 4}, 1);
    SDVAE& m = *sd_vae(*c.model);
    std::vector<Status> refusals = {
        c.model->vae->decode(*ex_, z).status(),
        c.model->vae->decode_decide(*ex_, z.shape()).status(),
        c.model->vae->decode_tiled(*ex_, z, VAETileOptions{64, 16, {}}).status(),
        vae_decode(*ex_, m, z).status(),
        vae_decide_for(*ex_, m.config, DType::F32, z.shape(), true, UINT64_MAX, UINT64_MAX)
            .status()};
    for (const Status& st : refusals) {
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), ErrorCode::INVALID_ARGUMENT);
      EXPECT_NE(st.message().find(c.message), std::string::npos) << st.message();
    }
    std::printf("  %s\n", refusals[0].message().c_str());
  }
  // Images too: the encoder takes 3 channels.
  auto e = model_->vae->encode(*ex_, randn(Shape{1, 4, 8, 8}, 2));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("the image has 4 channels but this VAE takes 3-channel "
                                      "images"),
            std::string::npos)
      << e.status().message();
}

// make_flux_vae's full-size layout is ComfyUI's: the same names and shapes as model.py's
// Encoder / Decoder at the default ddconfig with z_channels 16 (244 tensors, 83.8 M parameters,
// the golden's metadata); the tiny file loads as a 16-channel VAE with downscale 8 and decodes.
TEST_F(FluxVAETest, MakeFluxVAEWritesComfyUILayout) {
  auto layout = nlohmann::json::parse(gold_->metadata().at("full_size.layout"));
  auto full = flux_vae_tensors(flux_vae_config(ModelSize::FULL), "");
  ASSERT_TRUE(full.ok()) << full.status().str();
  std::map<std::string, Shape> want;
  for (auto& [name, dims] : layout.items()) {
    Shape s;
    s.rank = int(dims.size());
    for (int i = 0; i < s.rank; ++i) s[i] = dims[size_t(i)].get<int64_t>();
    want[name] = s;
  }
  EXPECT_EQ(want.size(), 244u);
  EXPECT_EQ(*full, want);
  uint64_t params = 0;
  for (const auto& [name, s] : *full) params += uint64_t(s.numel());
  EXPECT_EQ(params, 83819683u);
  auto prefixed = flux_vae_tensors(flux_vae_config(ModelSize::FULL), kFluxVAEPrefix);
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(prefixed->begin()->first.rfind("vae.", 0), 0u);

  const std::string path = (tmp_ / "ae.safetensors").string();
  auto written = make_flux_vae(ModelSize::TINY, 7, DType::F32, path);
  ASSERT_TRUE(written.ok()) << written.status().str();
  auto m = load(path);
  ASSERT_TRUE(m && m->vae);
  EXPECT_EQ(sd_vae(*m)->config, flux_vae_config(ModelSize::TINY)) << sd_vae(*m)->config.str();
  EXPECT_EQ(m->vae->latent_channels(), 16);
  EXPECT_EQ(m->vae->downscale(), 8);
  auto d = m->vae->decode(*ex_, randn(Shape{1, 16, 4, 6}, 3));
  ASSERT_TRUE(d.ok()) << d.status().str();
  EXPECT_EQ(d->image.shape(), (Shape{1, 3, 32, 48}));
  for (int64_t i = 0; i < d->image.numel(); ++i) ASSERT_TRUE(std::isfinite(d->image.f32()[i]));
}

}  // namespace
}  // namespace hr
