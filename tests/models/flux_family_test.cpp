// The Flux.1 families (models/flux/flux_family.h) and the DiT component (flux_model.h): detection
// of dev / schnell / Fill and of the files make-model writes, the component's run() on ComfyUI's
// Flux golden (tests/data/flux/dit_golden.safetensors, make_dit_golden.py) with its inputs built
// from conditioning entries, and the make-model tiny round trip.
#include "models/flux/flux_family.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "memory/weight_set.h"
#include "models/checkpoint.h"
#include "models/flux/flux_make_model.h"
#include "models/flux/flux_model.h"
#include "models/flux/flux_text_encoder.h"
#include "models/flux/flux_tokens.h"
#include "models/make_model.h"
#include "models/safetensors.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
const std::vector<int> kGoldenAxes = {4, 6, 6};  // make_dit_golden.py: head dim 16

struct Cpu {
  std::unique_ptr<Backend> backend = cpu_backend_create(1);
  Allocator alloc{*backend};
  Executor ex{*backend, alloc, executor_policies_default(*backend)};
};

HostTensor load(const SafetensorsFile& f, const std::string& name) {
  Result<HostTensor> t = f.load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

// Row `i` of a [N, ...] tensor as [1, ...].
std::shared_ptr<const HostTensor> row(const HostTensor& t, int64_t i) {
  Shape s = t.shape();
  const int64_t per = t.numel() / s[0];
  s[0] = 1;
  auto out = std::make_shared<HostTensor>(DType::F32, s);
  std::memcpy(out->f32(), t.f32() + i * per, size_t(per) * 4);
  return out;
}

// The golden's batch row i as a conditioning entry: its text tokens, pooled vector and guidance.
CondEntry golden_entry(const SafetensorsFile& f, int64_t i) {
  CondEntry e;
  e.cond = row(load(f, "golden.txt"), i);
  e.extras.set(kCondPooledOutput, row(load(f, "golden.y"), i));
  e.extras.set(kCondGuidance, double(load(f, "golden.guidance").f32()[i]));
  return e;
}

class FluxGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = model_load(test::data_path("flux/dit_golden.safetensors"));
    ASSERT_TRUE(m.ok()) << m.status().str();
    model_ = std::move(m).value();
    file_ = model_->file;
    ASSERT_EQ(model_->info.family_name(), "flux");
    flux_ = flux_model(*model_);
    ASSERT_NE(flux_, nullptr);
    flux_->config.axes_dim = kGoldenAxes;  // not Flux's 128-wide head: set as the golden has it
    latent_ = load(*file_, "golden.latent");
    timesteps_ = load(*file_, "golden.timesteps");
    Result<HostTensor> want = flux_unpatchify(load(*file_, "golden.out"), 16, 8, 6);
    ASSERT_TRUE(want.ok()) << want.status().str();
    want_ = std::move(want).value();
  }

  std::unique_ptr<LoadedModel> model_;
  std::shared_ptr<const SafetensorsFile> file_;
  FluxModel* flux_ = nullptr;
  HostTensor latent_, timesteps_, want_;
  Cpu cpu_;
};

TEST_F(FluxGolden, ComponentRunMatchesComfyFlux) {
  EXPECT_EQ(flux_->sampling().kind, ModelSamplingSpec::Kind::FLUX);
  EXPECT_DOUBLE_EQ(flux_->sampling().shift, 1.15);
  CondEntry e0 = golden_entry(*file_, 0), e1 = golden_entry(*file_, 1);
  const CondEntry* entries[] = {&e0, &e1};
  Result<HostTensor> out = flux_->run(cpu_.ex, flux_->weights(), latent_, timesteps_, entries);
  ASSERT_TRUE(out.ok()) << out.status().str();
  const double err = test::rel_err(*out, want_);
  std::printf("flux component rel error %.3g\n", err);
  EXPECT_LT(err, kRelTol);
}

TEST_F(FluxGolden, OneEntryPerCallGivesTheSameRows) {
  for (int64_t i = 0; i < 2; ++i) {
    CondEntry e = golden_entry(*file_, i);
    const CondEntry* entries[] = {&e};
    std::shared_ptr<const HostTensor> x = row(latent_, i), t = row(timesteps_, i);
    Result<HostTensor> out = flux_->run(cpu_.ex, flux_->weights(), *x, *t, entries);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_LT(test::rel_err(*out, *row(want_, i)), kRelTol) << "row " << i;
  }
}

// ComfyUI's Flux._forward on an odd 7 x 5 latent (forward_golden.safetensors, made by
// make_forward_golden.py with the same weights): circular padding to 8 x 6, the ids, the crop;
// and with guidance None (FluxDisableGuidance), the guidance embedding skipped.
TEST_F(FluxGolden, OddLatentAndNoGuidanceMatchComfyForward) {
  auto f = SafetensorsFile::open(test::data_path("flux/forward_golden.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().str();
  const SafetensorsFile& fwd = **f;
  HostTensor latent = load(fwd, "fwd.latent"), t = load(fwd, "fwd.timesteps");
  HostTensor ctx = load(fwd, "fwd.context"), y = load(fwd, "fwd.y"), g = load(fwd, "fwd.guidance");
  for (bool guided : {true, false}) {
    std::vector<CondEntry> es(2);
    for (int64_t i = 0; i < 2; ++i) {
      es[size_t(i)].cond = row(ctx, i);
      es[size_t(i)].extras.set(kCondPooledOutput, row(y, i));
      if (guided) {
        es[size_t(i)].extras.set(kCondGuidance, double(g.f32()[i]));
      } else {
        es[size_t(i)].extras.set(kCondGuidance, std::monostate{});
      }
    }
    const CondEntry* entries[] = {&es[0], &es[1]};
    Result<HostTensor> out = flux_->run(cpu_.ex, flux_->weights(), latent, t, entries);
    ASSERT_TRUE(out.ok()) << out.status().str();
    HostTensor want = load(fwd, guided ? "fwd.out" : "fwd.out_no_guidance");
    const double err = test::rel_err(*out, want);
    std::printf("flux forward (%s guidance) rel error %.3g\n", guided ? "with" : "no", err);
    EXPECT_LT(err, kRelTol);
  }
}

TEST_F(FluxGolden, MissingPooledOutputOrContextWidthIsRefused) {
  CondEntry e = golden_entry(*file_, 0);
  e.extras = CondExtras{};
  const CondEntry* entries[] = {&e};
  std::shared_ptr<const HostTensor> x = row(latent_, 0), t = row(timesteps_, 0);
  Result<HostTensor> out = flux_->run(cpu_.ex, flux_->weights(), *x, *t, entries);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("pooled output"), std::string::npos);
  CondEntry wide = golden_entry(*file_, 0);
  wide.cond = std::make_shared<HostTensor>(DType::F32, Shape{1, 5, 4096});
  const CondEntry* wides[] = {&wide};
  EXPECT_FALSE(flux_->run(cpu_.ex, flux_->weights(), *x, *t, wides).ok());
}

// ---------------------------------------------------------------------------------------------
// Files made by make-model (tiny) and variants of its DiT.

class FluxFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hr_flux_family_test_" + std::to_string(getpid()));
    MakeModelSpec spec;
    spec.arch = "flux";
    spec.size = ModelSize::TINY;
    spec.seed = 7;
    Result<std::vector<FluxMadeFile>> made = flux_make_model_write(spec, dir_.string());
    ASSERT_TRUE(made.ok()) << made.status().str();
    made_ = std::move(made).value();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string path(const std::string& rel) { return (dir_ / rel).string(); }
  static Result<CheckpointInfo> inspect(const std::string& p) {
    auto f = SafetensorsFile::open(p);
    if (!f.ok()) return f.status();
    return checkpoint_inspect(**f);
  }
  // The tiny DiT with `edit` applied to its configuration, random weights, written bare.
  static std::string dit_variant(const std::string& name, void (*edit)(FluxConfig&)) {
    FluxConfig c = flux_make_config(ModelSize::TINY).dit;
    edit(c);
    Result<Graph> g = flux_dit_graph(c, 1, 1, 1, 1, DType::F32);
    EXPECT_TRUE(g.ok()) << g.status().str();
    WeightSet w;
    make_model_random_weights(*g, 1, w);
    std::vector<std::pair<std::string, const HostTensor*>> list;
    for (const std::string& n : w.names()) list.emplace_back(n, w.find(n));
    const std::string p = path(name);
    EXPECT_TRUE(safetensors_write(p, list).ok());
    return p;
  }

  static fs::path dir_;
  static std::vector<FluxMadeFile> made_;
};
fs::path FluxFiles::dir_;
std::vector<FluxMadeFile> FluxFiles::made_;

TEST_F(FluxFiles, DetectsTheBareDevDiT) {
  Result<CheckpointInfo> info = inspect(path("diffusion_models/flux1-dev.safetensors"));
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->family_name(), "flux");
  EXPECT_EQ(info->family->display_name, "Flux.1");
  EXPECT_TRUE(info->has_diffusion);
  EXPECT_EQ(info->diffusion_prefix, "");
  EXPECT_FALSE(info->has_vae);
  EXPECT_TRUE(info->text_encoders.empty());
  EXPECT_EQ(info->storage_dtype, DType::BF16);
  EXPECT_EQ(info->family->latent.channels, 16);
  EXPECT_FLOAT_EQ(info->family->latent.scale_factor, 0.3611f);
  EXPECT_FLOAT_EQ(info->family->latent.shift_factor, 0.1159f);
}

TEST_F(FluxFiles, DetectsTheSingleFileCheckpoint) {
  Result<CheckpointInfo> info = inspect(path("checkpoints/flux1-dev-all.safetensors"));
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->family_name(), "flux");
  EXPECT_EQ(info->diffusion_prefix, "model.diffusion_model.");
  EXPECT_TRUE(info->has_vae);
  EXPECT_EQ(info->vae_prefix, "vae.");
  ASSERT_EQ(info->text_encoders.size(), 2u);
  EXPECT_EQ(info->text_encoders[0].kind, kFluxClipL);
  EXPECT_EQ(info->text_encoders[0].prefix, "text_encoders.clip_l.transformer.");
  EXPECT_EQ(info->text_encoders[1].kind, kFluxT5XXL);
  EXPECT_EQ(info->text_encoders[1].prefix, "text_encoders.t5xxl.transformer.");
}

TEST_F(FluxFiles, SchnellHasNoGuidanceAndFlowSampling) {
  std::string p =
      dit_variant("schnell.safetensors", [](FluxConfig& c) { c.guidance_embed = false; });
  auto m = model_load(p);
  ASSERT_TRUE(m.ok()) << m.status().str();
  EXPECT_EQ((*m)->info.family_name(), "flux-schnell");
  ModelSamplingSpec s = (*m)->diffusion->sampling();
  EXPECT_EQ(s.kind, ModelSamplingSpec::Kind::FLOW);
  EXPECT_DOUBLE_EQ(s.shift, 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier, 1.0);
  ASSERT_NE(flux_model(**m), nullptr);
  EXPECT_FALSE(flux_model(**m)->config.guidance_embed);
}

// Note [family compute dtype]: with --dtype auto on a bf16 backend an f16 run computes Flux's
// DiT in bf16, ComfyUI's choice, so the bf16 file's weights are views of the file; an explicit
// f16 converts them.
TEST_F(FluxFiles, AutoDtypeComputesTheDiTInBf16) {
  LoadOptions o;
  o.diffusion_dtype = DType::F16;
  o.load_vae = false;
  for (bool autod : {true, false}) {
    o.diffusion_dtype_auto = autod;
    auto m = model_load(path("diffusion_models/flux1-dev.safetensors"), o);
    ASSERT_TRUE(m.ok()) << m.status().str();
    const HostTensor* w = (*m)->diffusion->weights().find("img_in.weight");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dtype(), autod ? DType::BF16 : DType::F16) << "auto " << autod;
    EXPECT_EQ(w->is_view(), autod) << "auto " << autod;
  }
}

TEST_F(FluxFiles, FillIsRefusedByName) {
  std::string p = dit_variant("fill.safetensors", [](FluxConfig& c) { c.in_channels = 384; });
  Result<CheckpointInfo> info = inspect(p);
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->family_name(), "flux");  // ComfyUI's detection finds Flux, FluxInpaint by width
  auto m = model_load(p);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::UNSUPPORTED);
  EXPECT_NE(m.status().message().find("Flux Fill"), std::string::npos) << m.status().str();
}

TEST_F(FluxFiles, BareT5AndVAEAreNotFluxDiffusionModels) {
  for (const char* rel : {"text_encoders/t5xxl_fp16.safetensors", "vae/ae.safetensors",
                          "text_encoders/clip_l.safetensors"}) {
    Result<CheckpointInfo> info = inspect(path(rel));
    if (!info.ok()) continue;  // nothing claims a bare T5 yet (the text-encoder loaders read it)
    EXPECT_FALSE(info->has_diffusion) << rel;
    EXPECT_EQ(info->family_name().rfind("flux", 0), std::string::npos) << rel;
  }
  Result<CheckpointInfo> t5 = inspect(test::data_path("t5/tiny_t5_encoder.safetensors"));
  if (t5.ok()) {
    EXPECT_FALSE(t5->has_diffusion);
  }
  Result<CheckpointInfo> vae = inspect(path("vae/ae.safetensors"));
  ASSERT_TRUE(vae.ok()) << vae.status().str();
  EXPECT_TRUE(vae->has_vae);
  EXPECT_FALSE(vae->family_known);
}

// Without the checkpoint (make-model --no-checkpoint): the four component files, byte-identical to
// the full run's, and no checkpoints/ folder.
TEST_F(FluxFiles, MakeModelWithoutCheckpoint) {
  const fs::path dir = dir_ / "no_checkpoint";
  MakeModelSpec spec;
  spec.arch = "flux";
  spec.size = ModelSize::TINY;
  spec.seed = 7;
  Result<std::vector<FluxMadeFile>> made = flux_make_model_write(spec, dir.string(), false);
  ASSERT_TRUE(made.ok()) << made.status().str();
  ASSERT_EQ(made->size(), 4u);
  EXPECT_FALSE(fs::exists(dir / "checkpoints"));
  for (const FluxMadeFile& f : *made) {
    const std::string rel = fs::relative(f.path, dir).string();
    EXPECT_NE(rel.rfind("checkpoints", 0), 0u) << rel;
    ASSERT_TRUE(fs::exists(path(rel))) << rel;
    EXPECT_EQ(fs::file_size(f.path), fs::file_size(path(rel))) << rel;
  }
}

TEST_F(FluxFiles, MakeModelTinyRoundTrip) {
  ASSERT_EQ(made_.size(), 5u);
  for (const FluxMadeFile& f : made_) EXPECT_TRUE(fs::exists(f.path)) << f.path;
  auto dit = SafetensorsFile::open(path("diffusion_models/flux1-dev.safetensors"));
  auto all = SafetensorsFile::open(path("checkpoints/flux1-dev-all.safetensors"));
  ASSERT_TRUE(dit.ok() && all.ok());
  // The checkpoint holds the same DiT values under its prefix.
  for (const char* name : {"img_in.weight", "double_blocks.0.img_attn.qkv.weight",
                           "single_blocks.0.norm.query_norm.scale"}) {
    const SafetensorsEntry* a = (*dit)->find(name);
    const SafetensorsEntry* b = (*all)->find(std::string("model.diffusion_model.") + name);
    ASSERT_TRUE(a && b) << name;
    ASSERT_EQ(a->end - a->begin, b->end - b->begin);
    EXPECT_EQ(std::memcmp((*dit)->raw(*a).data(), (*all)->raw(*b).data(), a->end - a->begin), 0);
  }
  // T5 and CLIP read back with the configurations they were made from.
  auto t5f = SafetensorsFile::open(path("text_encoders/t5xxl_fp16.safetensors"));
  ASSERT_TRUE(t5f.ok());
  Result<T5Config> t5 = t5_encoder_detect(**t5f, "");
  ASSERT_TRUE(t5.ok()) << t5.status().str();
  const FluxMakeConfig want = flux_make_config(ModelSize::TINY);
  EXPECT_EQ(t5->d_model, want.t5.d_model);
  EXPECT_EQ(t5->heads, want.t5.heads);
  EXPECT_EQ(t5->layers, want.t5.layers);
  Result<std::string> t5_prefix = t5_encoder_prefix(**all);
  ASSERT_TRUE(t5_prefix.ok()) << t5_prefix.status().str();
  EXPECT_EQ(*t5_prefix, "text_encoders.t5xxl.transformer.");

  // The checkpoint's DiT runs through the component on an odd-sized latent (padded as ComfyUI
  // pads) with finite output of the latent's shape; its VAE loads.
  auto m = model_load(path("checkpoints/flux1-dev-all.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  ASSERT_NE((*m)->vae, nullptr);
  FluxModel* flux = flux_model(**m);
  ASSERT_NE(flux, nullptr);
  EXPECT_EQ(flux->config.axes_dim, (std::vector<int>{16, 56, 56}));
  HostTensor x(DType::F32, Shape{1, 16, 5, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(0.37f * float(i));
  HostTensor t(DType::F32, Shape{1});
  t.f32()[0] = 0.8f;
  CondEntry e;
  auto ctx = std::make_shared<HostTensor>(DType::F32, Shape{1, 3, want.dit.context_in_dim});
  auto pooled = std::make_shared<HostTensor>(DType::F32, Shape{1, want.dit.vec_in_dim});
  for (int64_t i = 0; i < ctx->numel(); ++i) ctx->f32()[i] = std::cos(0.11f * float(i));
  for (int64_t i = 0; i < pooled->numel(); ++i) pooled->f32()[i] = 0.01f * float(i % 17);
  e.cond = ctx;
  e.extras.set(kCondPooledOutput, std::shared_ptr<const HostTensor>(pooled));
  const CondEntry* entries[] = {&e};
  Cpu cpu;
  Result<HostTensor> out = flux->run(cpu.ex, flux->weights(), x, t, entries);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(out->shape(), x.shape());
  double sum = 0;
  for (int64_t i = 0; i < out->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out->f32()[i]));
    sum += std::fabs(out->f32()[i]);
  }
  EXPECT_GT(sum, 0.0);
}

// Full size is the published layout: the dev preset (whose element count flux_dit_test checks
// against ComfyUI's), T5 v1.1 XXL and CLIP-L.
TEST(FluxMakeConfig, FullIsDevT5XXLAndClipL) {
  FluxMakeConfig c = flux_make_config(ModelSize::FULL);
  EXPECT_EQ(c.dit, flux_config_dev());
  EXPECT_EQ(c.t5.d_model, 4096);
  EXPECT_EQ(c.t5.layers, 24);
  EXPECT_EQ(c.t5.heads, 64);
  EXPECT_EQ(c.t5.d_ff, 10240);
  EXPECT_EQ(c.clip.width, 768);
  EXPECT_EQ(c.clip.layers, 12);
  EXPECT_EQ(c.vae.z_channels, 16);
  EXPECT_FALSE(c.vae.use_quant_conv);
}

}  // namespace
}  // namespace hr
