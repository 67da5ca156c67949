// Note [model families]: a toy family registered here, with no folder and no change anywhere
// else, is loaded by CheckpointLoaderSimple, encoded by CLIPTextEncode, sampled by
// KSamplerAdvanced with its own latent scale and conditioning extras, and decoded by VAEDecode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "models/weight_load.h"
#include "models/checkpoint.h"
#include "models/latent_formats.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "sampling/model_sampling.h"
#include "test_compare.h"
#include "sampling/schedulers.h"
#include "workflow/execute.h"
#include "node_harness.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr float kToyScale = 0.25f;
constexpr int64_t kToyDownscale = 4;

// What the toy diffusion model saw.
struct ToyCalls {
  int calls = 0;
  int64_t last_batch = 0, last_tokens = 0;
  size_t last_entries = 0;
  std::vector<double> guidance;  // per entry of the last call
  float first_x = 0;             // x[0] of the first call
};
ToyCalls& toy_calls() {
  static ToyCalls c;
  return c;
}

struct ToyDiffusion final : DiffusionModel {
  const ModelFamily* fam;
  WeightSet store;
  explicit ToyDiffusion(const ModelFamily& f) : fam(&f) {}
  const ModelFamily& family() const override { return *fam; }
  WeightSet& weights() override { return store; }
  ModelSamplingSpec sampling() const override { return fam->sampling; }
  Result<uint64_t> min_device_bytes(Executor&, const Shape&, int64_t) override { return 0; }
  // eps = 0: the sampler keeps the latent as it is.
  Result<HostTensor> run(Executor&, WeightSource&, const HostTensor& x, const HostTensor&,
                         std::span<const CondEntry* const> entries) override {
    ToyCalls& c = toy_calls();
    if (c.calls++ == 0) c.first_x = x.f32()[0];
    c.last_batch = x.shape()[0];
    c.last_entries = entries.size();
    c.last_tokens = cond_context_batch(entries, 1).shape()[1];
    c.guidance.clear();
    for (const CondEntry* e : entries) c.guidance.push_back(e->extras.get_float("guidance").value_or(-1));
    return HostTensor(DType::F32, x.shape());
  }
};

// Encodes every prompt as a [1, 5, 8] context of its length, with a "guidance" extra.
struct ToyText final : TextEncoder {
  const ModelFamily* fam;
  explicit ToyText(const ModelFamily& f) : fam(&f) {}
  const ModelFamily& family() const override { return *fam; }
  std::vector<std::string> parts() const override { return {"t5"}; }
  std::vector<std::shared_ptr<WeightSet>> stores() const override { return {}; }
  Result<CondEntry> encode(Executor&, const std::map<std::string, std::string>& texts, int,
                           const EncoderSources&) const override {
    HostTensor c(DType::F32, Shape{1, 5, 8});
    for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = float(texts.at("t5").size());
    CondEntry e;
    e.cond = std::make_shared<const HostTensor>(std::move(c));
    e.extras.set("guidance", 3.5);
    return e;
  }
};

// Decodes every latent pixel to a 4 x 4 block of 0.5 (image 0.75 after ComfyUI's mapping).
struct ToyVAE final : Autoencoder {
  WeightSet store;
  WeightSet& weights() override { return store; }
  int64_t downscale() const override { return kToyDownscale; }
  int latent_channels() const override { return 4; }
  Result<VAEDecision> decode_decide(Executor&, const Shape&) override { return VAEDecision{}; }
  Result<VAEDecision> encode_decide(Executor&, const Shape&) override { return VAEDecision{}; }
  Result<VAEDecoded> decode(Executor&, const HostTensor& latent,
                            const std::function<Status()>&) override {
    const Shape& s = latent.shape();
    VAEDecoded d;
    d.image = HostTensor(DType::F32, Shape{s[0], 3, s[2] * kToyDownscale, s[3] * kToyDownscale});
    for (int64_t i = 0; i < d.image.numel(); ++i) d.image.f32()[i] = 0.5f;
    return d;
  }
  Result<VAEEncoded> encode(Executor&, const HostTensor& image,
                            const std::function<Status()>&) override {
    const Shape& s = image.shape();
    VAEEncoded e;
    e.moments.mean = HostTensor(DType::F32, Shape{s[0], 4, s[2] / kToyDownscale, s[3] / kToyDownscale});
    e.moments.logvar = e.moments.mean.clone();
    return e;
  }
  Result<HostTensor> decode_tiled(Executor& ex, const HostTensor& latent,
                                  const VAETileOptions&) override {
    HR_ASSIGN_OR_RETURN(VAEDecoded d, decode(ex, latent, {}));
    return std::move(d.image);
  }
};

ModelFamily toy_family() {
  ModelFamily f;
  f.name = "toy-workflow";
  f.display_name = "Toy";
  f.diffusion_name = "dit";
  f.detect = [](const SafetensorsFile& file) -> std::optional<FamilyMatch> {
    if (!file.contains("toy_model.scale")) return std::nullopt;
    FamilyMatch m;
    m.diffusion_prefix = "toy_model.";
    m.vae_prefix = "toy_vae.";
    m.text_encoders.push_back({"toy_t5", "toy_te."});
    return m;
  };
  f.latent = LatentFormat{4, kToyScale, std::vector<std::array<float, 3>>(4, {0.f, 0.f, 0.f}), {}};
  f.sampling = ModelSamplingSpec{};  // discrete, eps
  f.text_encoder_kinds = {"toy_t5"};
  f.diffusion_create = [](const ComponentLoad& load) -> Result<std::unique_ptr<DiffusionModel>> {
    auto m = std::make_unique<ToyDiffusion>(*load.info.family);
    HR_TRY(weights_load_prefix(m->store, load.file, load.info.diffusion_prefix, DType::F32));
    return std::unique_ptr<DiffusionModel>(std::move(m));
  };
  f.autoencoder_create = [](const ComponentLoad&) -> Result<std::unique_ptr<Autoencoder>> {
    return std::unique_ptr<Autoencoder>(new ToyVAE());
  };
  f.text_encoder_create = [](const ComponentLoad& load) -> Result<std::unique_ptr<TextEncoder>> {
    return std::unique_ptr<TextEncoder>(new ToyText(*load.info.family));
  };
  return f;
}

// The latent both sampler cases start from.
HostTensor toy_latent() {
  HostTensor latent(DType::F32, Shape{1, 4, 8, 8});
  for (int64_t i = 0; i < latent.numel(); ++i) latent.f32()[i] = 0.5f + 0.01f * float(i % 7);
  return latent;
}

// KSamplerAdvanced without noise: 2 Euler steps of the normal schedule from `start_step`.
NodeInputs toy_sampler_inputs(std::shared_ptr<const ModelValue> model,
                              std::shared_ptr<const Conditioning> positive,
                              std::shared_ptr<const Conditioning> negative,
                              const HostTensor& latent, int start_step) {
  NodeInputs ks;
  ks.links["model"] = std::move(model);
  ks.links["positive"] = std::move(positive);
  ks.links["negative"] = std::move(negative);
  ks.links["latent_image"] = test::latent_value(latent);
  ks.literals["noise_seed"] = 1;
  ks.literals["add_noise"] = "disable";
  ks.literals["steps"] = 2;
  ks.literals["cfg"] = 5.0;
  ks.literals["sampler_name"] = "euler";
  ks.literals["scheduler"] = "normal";
  ks.literals["start_at_step"] = start_step;
  ks.literals["end_at_step"] = 10000;
  ks.literals["return_with_leftover_noise"] = "disable";
  return ks;
}

class ToyFamilyWorkflow : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr_family_toy_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "checkpoints");
    HostTensor one(DType::F32, Shape{1});
    one.f32()[0] = 1.f;
    std::vector<std::pair<std::string, const HostTensor*>> list = {
        {"toy_model.scale", &one}, {"toy_vae.w", &one}, {"toy_te.embed", &one}};
    ASSERT_TRUE(safetensors_write((dir_ / "checkpoints" / "toy.safetensors").string(), list, {}).ok());
    ASSERT_TRUE(model_family_register(toy_family()).ok());
    rt_.wire(opts_);
    opts_.models_dir = dir_.string();
    NodeEnv env;
    env.models_dir = dir_.string();
    nodes_register(registry_, env);
    toy_calls() = ToyCalls{};
  }
  void TearDown() override {
    model_family_unregister("toy-workflow");
    fs::remove_all(dir_);
  }

  Result<std::vector<std::any>> run(const std::string& cls, const NodeInputs& in) {
    const NodeDef* def = registry_.find(cls);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", cls);
    ExecContext ctx{opts_, prompt_, "1"};
    return def->run(ctx, in);
  }

  fs::path dir_;
  test::CpuRuntime rt_;
  ExecOptions opts_;
  NodeRegistry registry_;
  Prompt prompt_;
};

TEST_F(ToyFamilyWorkflow, NodesRunAFamilyTheyDoNotKnow) {
  NodeInputs load;
  load.literals["ckpt_name"] = "toy.safetensors";
  auto loaded = run("CheckpointLoaderSimple", load);
  ASSERT_TRUE(loaded.ok()) << loaded.status().str();
  auto model = test::output_as<ModelValue>(loaded, 0);
  auto clip = test::output_as<CLIPValue>(loaded, 1);
  auto vae = test::output_as<VAEValue>(loaded, 2);
  ASSERT_TRUE(model && clip && vae);
  EXPECT_EQ(model->model->family().name, "toy-workflow");

  std::shared_ptr<const Conditioning> conds[2];
  for (int i = 0; i < 2; ++i) {
    NodeInputs enc;
    enc.links["clip"] = clip;
    enc.literals["text"] = i == 0 ? "a cat" : "";
    conds[i] = test::output_as<Conditioning>(run("CLIPTextEncode", enc));
    ASSERT_TRUE(conds[i]);
    EXPECT_EQ(conds[i]->entries[0].cond->shape(), (Shape{1, 5, 8}));
  }

  const HostTensor latent = toy_latent();
  NodeInputs ks = toy_sampler_inputs(model, conds[0], conds[1], latent, 0);
  auto sampled = test::output_as<Latent>(run("KSamplerAdvanced", ks));
  ASSERT_TRUE(sampled);
  const ToyCalls& c = toy_calls();
  EXPECT_EQ(c.calls, 2);         // one batched cond + uncond call per Euler step
  EXPECT_EQ(c.last_batch, 2);
  EXPECT_EQ(c.last_entries, 2u);
  EXPECT_EQ(c.last_tokens, 5);
  EXPECT_EQ(c.guidance, (std::vector<double>{3.5, 3.5}));
  // The sampler scaled the latent by the toy's factor (model = vae * 0.25) and fed the model
  // x / sqrt(sigma^2 + 1) at the first sigma (ModelSamplingDiscrete's largest).
  const ModelSamplingDiscrete ms(SamplingPrediction::EPS);
  const double sigma = ms.sigma_max();
  EXPECT_NEAR(c.first_x, 0.5 * kToyScale / std::sqrt(sigma * sigma + 1.0), 1e-6);
  // eps = 0 leaves the latent; dividing by the scale again gives it back.
  EXPECT_LE(test::max_abs_diff(*sampled->samples, latent), 1e-6f);

  NodeInputs dec;
  dec.links["samples"] = std::any(sampled);
  dec.links["vae"] = vae;
  auto img = test::output_as<ImageValue>(run("VAEDecode", dec));
  ASSERT_TRUE(img);
  EXPECT_EQ(img->pixels->shape(), (Shape{1, 8 * kToyDownscale, 8 * kToyDownscale, 3}));
  EXPECT_FLOAT_EQ(img->pixels->f32()[0], 0.75f);
}

// A family whose spec says flow matching is sampled with ModelSamplingDiscreteFlow (CONST): from
// step 1 of 2 without noise, x = (1 - s1) * latent (noise_scaling), the model sees x itself
// (calculate_input is the identity), the toy's zero output keeps x, and inverse_noise_scaling at
// sigma 0 leaves it: the latent comes back scaled by 1 - s1.
TEST_F(ToyFamilyWorkflow, FlowFamilySamplesWithFlowMatching) {
  model_family_unregister("toy-workflow");
  ModelFamily flow = toy_family();
  flow.sampling.kind = ModelSamplingSpec::Kind::FLOW;
  flow.sampling.shift = 3.0;
  ASSERT_TRUE(model_family_register(flow).ok());
  NodeInputs load;
  load.literals["ckpt_name"] = "toy.safetensors";
  auto loaded = run("CheckpointLoaderSimple", load);
  ASSERT_TRUE(loaded.ok()) << loaded.status().str();
  auto cond = std::make_shared<const Conditioning>(Conditioning{{CondEntry{
      std::make_shared<const HostTensor>(DType::F32, Shape{1, 5, 8}), {}}}});
  const HostTensor latent = toy_latent();
  NodeInputs ks =
      toy_sampler_inputs(test::output_as<ModelValue>(loaded, 0), cond, cond, latent, 1);
  auto sampled = test::output_as<Latent>(run("KSamplerAdvanced", ks));
  ASSERT_TRUE(sampled);
  const ModelSamplingDiscreteFlow ms(3.0);
  auto sigmas = calculate_sigmas(ms, "normal", 2);
  ASSERT_TRUE(sigmas.ok());
  const float keep = 1.0f - (*sigmas)[1];
  ASSERT_GT(keep, 0.0f);
  ASSERT_LT(keep, 1.0f);
  EXPECT_EQ(toy_calls().calls, 1);
  EXPECT_NEAR(toy_calls().first_x, keep * 0.5f * kToyScale, 1e-6);
  HostTensor want = latent.clone();
  for (int64_t i = 0; i < want.numel(); ++i) want.f32()[i] *= keep;
  EXPECT_LE(test::max_abs_diff(*sampled->samples, want), 1e-6f);
}

// Flux's sampling side on a family shaped like Flux (16-channel latent with ComfyUI's Flux
// scale and shift, ModelSamplingFlux): EmptySD3LatentImage, ModelSamplingFlux (a view with the
// resolution's shift; the loaded model is shared), FluxGuidance / FluxDisableGuidance, and the
// sampler's process_in / process_out (Note [latent format shift]).
class ToyFluxWorkflow : public ToyFamilyWorkflow {
 protected:
  void SetUp() override {
    ToyFamilyWorkflow::SetUp();
    model_family_unregister("toy-workflow");
    ModelFamily flux = toy_family();
    flux.latent = latent_format_flux();
    flux.sampling.kind = ModelSamplingSpec::Kind::FLUX;
    flux.sampling.shift = 1.15;
    ASSERT_TRUE(model_family_register(flux).ok());
    NodeInputs load;
    load.literals["ckpt_name"] = "toy.safetensors";
    auto loaded = run("CheckpointLoaderSimple", load);
    ASSERT_TRUE(loaded.ok()) << loaded.status().str();
    model_ = test::output_as<ModelValue>(loaded, 0);
    ASSERT_TRUE(model_);
    NodeInputs patch;
    patch.links["model"] = model_;
    patch.literals = {{"max_shift", 1.15}, {"base_shift", 0.5}, {"width", 512}, {"height", 768}};
    patched_ = test::output_as<ModelValue>(run("ModelSamplingFlux", patch));
    ASSERT_TRUE(patched_);
    auto cond = std::make_shared<const Conditioning>(Conditioning{{CondEntry{
        std::make_shared<const HostTensor>(DType::F32, Shape{1, 5, 8}), {}}}});
    NodeInputs g;
    g.links["conditioning"] = cond;
    g.literals["guidance"] = 2.0;
    positive_ = test::output_as<Conditioning>(run("FluxGuidance", g));
    NodeInputs off;
    off.links["conditioning"] = cond;
    negative_ = test::output_as<Conditioning>(run("FluxDisableGuidance", off));
    ASSERT_TRUE(positive_ && negative_);
    toy_calls() = ToyCalls{};
  }

  std::shared_ptr<const ModelValue> model_, patched_;
  std::shared_ptr<const Conditioning> positive_, negative_;
};

TEST_F(ToyFluxWorkflow, NodesSetWhatComfyUISets) {
  // ModelSamplingFlux: shift = 1.15 at 4096 tokens, 0.5 at 256: 512x768 has 1536.
  ASSERT_TRUE(patched_->sampling.has_value());
  EXPECT_EQ(patched_->sampling->kind, ModelSamplingSpec::Kind::FLUX);
  EXPECT_NEAR(patched_->sampling->shift, 0.5 + (1536.0 - 256.0) * 0.65 / 3840.0, 1e-12);
  EXPECT_EQ(patched_->model, model_->model);  // the same loaded model
  EXPECT_FALSE(model_->sampling.has_value());
  EXPECT_EQ(model_->sampling_spec().shift, 1.15);  // the family's own

  EXPECT_EQ(cond_guidance(positive_->entries[0].extras), 2.0);
  EXPECT_TRUE(negative_->entries[0].extras.is_none(kCondGuidance));
  EXPECT_EQ(cond_guidance(negative_->entries[0].extras), std::nullopt);
  EXPECT_EQ(cond_guidance(CondExtras{}), kFluxGuidanceDefault);

  NodeInputs empty;
  empty.literals = {{"width", 72}, {"height", 40}, {"batch_size", 2}};
  auto lat = test::output_as<Latent>(run("EmptySD3LatentImage", empty));
  ASSERT_TRUE(lat);
  EXPECT_EQ(lat->samples->shape(), (Shape{2, 16, 5, 9}));
  for (int64_t i = 0; i < lat->samples->numel(); ++i) ASSERT_EQ(lat->samples->f32()[i], 0.0f);
}

// An empty latent enters the sampler unshifted (CFGGuider.inner_sample skips process_latent_in
// for zeros) and leaves through process_latent_out: the toy's zero velocity gives shift_factor.
TEST_F(ToyFluxWorkflow, EmptyLatentIsNotShiftedButTheResultIs) {
  NodeInputs empty;
  empty.literals = {{"width", 32}, {"height", 32}, {"batch_size", 1}};
  auto lat = test::output_as<Latent>(run("EmptySD3LatentImage", empty));
  ASSERT_TRUE(lat);
  NodeInputs ks = toy_sampler_inputs(patched_, positive_, negative_, *lat->samples, 0);
  auto sampled = test::output_as<Latent>(run("KSamplerAdvanced", ks));
  ASSERT_TRUE(sampled);
  EXPECT_EQ(toy_calls().calls, 2);
  EXPECT_EQ(toy_calls().first_x, 0.0f);
  EXPECT_EQ(toy_calls().guidance, (std::vector<double>{2.0, -1.0}));  // -1: no value (None)
  const LatentFormat f = latent_format_flux();
  for (int64_t i = 0; i < sampled->samples->numel(); ++i)
    ASSERT_EQ(sampled->samples->f32()[i], 0.0f / f.scale_factor + f.shift_factor) << i;
}

// A latent with content: from step 1 of 2 without noise, x = (1 - s1) (v - shift) scale with s1
// from the patched model's ModelSamplingFlux, and it comes back as x / scale + shift.
TEST_F(ToyFluxWorkflow, LatentIsShiftedInAndOut) {
  HostTensor latent(DType::F32, Shape{1, 16, 4, 4});
  for (int64_t i = 0; i < latent.numel(); ++i) latent.f32()[i] = 0.5f + 0.01f * float(i % 7);
  NodeInputs ks = toy_sampler_inputs(patched_, positive_, negative_, latent, 1);
  auto sampled = test::output_as<Latent>(run("KSamplerAdvanced", ks));
  ASSERT_TRUE(sampled);
  const ModelSamplingFlux ms(patched_->sampling->shift);
  auto sigmas = calculate_sigmas(ms, "normal", 2);
  ASSERT_TRUE(sigmas.ok());
  const float keep = 1.0f - (*sigmas)[1];
  ASSERT_GT(keep, 0.0f);
  ASSERT_LT(keep, 1.0f);
  const LatentFormat f = latent_format_flux();
  EXPECT_EQ(toy_calls().calls, 1);
  EXPECT_NEAR(toy_calls().first_x, keep * ((0.5f - f.shift_factor) * f.scale_factor), 1e-6);
  HostTensor want = latent.clone();
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float v = keep * ((want.f32()[i] - f.shift_factor) * f.scale_factor);
    want.f32()[i] = v / f.scale_factor + f.shift_factor;
  }
  EXPECT_LE(test::max_abs_diff(*sampled->samples, want), 1e-6f);
}

}  // namespace
}  // namespace hr
