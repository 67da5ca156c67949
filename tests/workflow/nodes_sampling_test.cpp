// KSamplerAdvanced, ConditioningCombine and CLIPSetLastLayer on the tiny SD1 checkpoint (CPU,
// f32), checked against ComfyUI's rules through relations that hold exactly in ComfyUI (these
// need the whole UNet in torch for absolute references, which the reference script cannot run):
// comfy/samplers.py KSampler.sample's sigma slicing (last_step + force_full_denoise, then
// start_step), common_ksampler's disable_noise, calc_cond_batch's mean over conditionings, and
// sd1_clip.py's clip_layer fallback.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "models/weight_load.h"
#include "models/checkpoint.h"
#include "models/sd/sd_text_encoder.h"
#include "models/sd/sd_unet.h"
#include "models/clip_tokenizer.h"
#include "models/prompt_weights.h"
#include "models/sd/unet.h"
#include "node_harness.h"
#include "test_compare.h"

namespace hr {
namespace {

// Note [sampling tolerance]: the split runs divide by the latent scale and multiply again
// between the stages (float rounding ~1e-7); anything above 1e-5 is a semantic difference.
constexpr double kTol = 1e-5;

// The fixture's random inputs come from a fresh seed per process, printed once;
// HEADROOM_TEST_SEED=N replays a run.
uint32_t inputs_seed() {
  static const uint32_t seed = [] {
    const char* e = std::getenv("HEADROOM_TEST_SEED");
    const uint32_t s = e && *e ? uint32_t(std::strtoul(e, nullptr, 10)) : std::random_device{}();
    std::printf("nodes sampling: random inputs from seed %u; HEADROOM_TEST_SEED=%u reproduces\n",
                s, s);
    return s;
  }();
  return seed;
}

HostTensor randn(Shape s, std::mt19937& gen) {
  HostTensor x(DType::F32, s);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(gen);
  return x;
}

std::shared_ptr<const Conditioning> cond_of(HostTensor c) {
  Conditioning out;
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(std::move(c));
  out.entries.push_back(std::move(e));
  return std::make_shared<const Conditioning>(std::move(out));
}

class NodesSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_.wire(opts_);
    auto m = model_load(test::golden_path("tiny-sd1.safetensors"));
    ASSERT_TRUE(m.ok()) << m.status().str();
    std::shared_ptr<LoadedModel> model(std::move(m).value());
    model_ = std::make_shared<const ModelValue>(ModelValue{model});
    int64_t ctx = sd_unet(*model)->config.context_dim;
    pos_ = cond_of(randn(Shape{1, 77, ctx}, gen_));
    pos2_ = cond_of(randn(Shape{1, 77, ctx}, gen_));
    neg_ = cond_of(randn(Shape{1, 77, ctx}, gen_));
    latent_ = randn(Shape{1, 4, 8, 8}, gen_);
  }

  Json common(int steps, double cfg) const {
    return Json{{"steps", steps}, {"cfg", cfg}, {"sampler_name", "euler"}, {"scheduler", "normal"}};
  }

  HostTensor run(const std::string& cls, Json literals, const HostTensor& latent,
                 std::shared_ptr<const Conditioning> pos = nullptr) {
    NodeInputs in;
    for (auto& [k, v] : literals.items()) in.literals[k] = v;
    in.links["model"] = model_;
    in.links["positive"] = pos ? pos : pos_;
    in.links["negative"] = neg_;
    in.links["latent_image"] = test::latent_value(latent);
    auto l = test::output_as<Latent>(h_.run(cls, in));
    return l ? l->samples->clone() : HostTensor();
  }

  // KSamplerAdvanced with 4 euler steps at cfg 7.5.
  HostTensor advanced(const HostTensor& latent, const char* add_noise, uint64_t seed, int start,
                      int end, const char* leftover) {
    Json j = common(4, 7.5);
    j["add_noise"] = add_noise;
    j["noise_seed"] = seed;
    j["start_at_step"] = start;
    j["end_at_step"] = end;
    j["return_with_leftover_noise"] = leftover;
    return run("KSamplerAdvanced", j, latent);
  }

  std::mt19937 gen_{inputs_seed()};
  test::CpuRuntime rt_;
  ExecOptions opts_;
  test::NodeHarness h_{opts_};
  std::shared_ptr<const ModelValue> model_;
  std::shared_ptr<const Conditioning> pos_, pos2_, neg_;
  HostTensor latent_;
};

// KSampler(denoise 1) is common_ksampler with no start/last step; KSamplerAdvanced(enable,
// 0..10000) slices nothing, so they agree bit for bit, and return_with_leftover_noise does not
// matter when end_at_step is past the last step.
TEST_F(NodesSampling, KSamplerEqualsAdvancedFullRange) {
  Json k = common(4, 7.5);
  k["seed"] = 7;
  k["denoise"] = 1.0;
  HostTensor ks = run("KSampler", k, latent_);
  HostTensor full = advanced(latent_, "enable", 7, 0, 10000, "disable");
  EXPECT_EQ(test::max_abs_diff(ks, full), 0.0f);
  EXPECT_EQ(test::max_abs_diff(advanced(latent_, "enable", 7, 0, 10000, "enable"), full), 0.0f);
}

// Note [cond/uncond split]: under a budget where the batched cond+uncond call cannot run even
// with every weight streamed but one entry's call can, KSampler runs them one after the other,
// says so, stays within the budget and gives the batched result bit for bit: the CPU ops
// compute a batch entry alone as in the batch (Note [batch-invariant linear] in cpu_linear.cpp).
// Before they did, OpenBLAS rounding moved with the batch and CFG grew it to 3e-6 .. 1.6e-4.
TEST_F(NodesSampling, CondAndUncondSplitUnderATightBudget) {
  Json k = common(2, 7.5);
  k["seed"] = 3;
  k["denoise"] = 1.0;
  HostTensor want = run("KSampler", k, latent_);
  Executor& ex = *rt_.executor;
  DiffusionModel& m = *model_->model->diffusion;
  auto need = [&](int64_t batch) {
    auto r = m.min_device_bytes(ex, Shape{batch, 4, 8, 8}, 77);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? *r : 0;
  };
  const uint64_t one = need(1), both = need(2);
  ASSERT_LT(one, both);
  const uint64_t budget = (one + both) / 2;
  ex.release_arena();
  model_->model->diffusion->weights().release_device();
  rt_.allocator->set_budget(budget);
  rt_.allocator->reset_peak();
  std::vector<std::string> said;
  opts_.on_event = [&](const ExecEvent& e) {
    if (e.kind == ExecEvent::Kind::MEMORY) said.push_back(e.message);
  };
  HostTensor got = run("KSampler", k, latent_);
  opts_.on_event = nullptr;
  rt_.allocator->set_budget(Allocator::kUnlimited);
  ASSERT_EQ(got.shape(), want.shape());
  const double rel = test::rel_err(got, want);
  std::printf("  split vs batched: rel L2 %.3g, max abs %.3g\n", rel, double(test::max_abs_diff(got, want)));
  EXPECT_LE(rel, 3e-5);
  EXPECT_EQ(test::max_abs_diff(got, want), 0.0f) << "split and batched runs must agree bit for bit";
  EXPECT_LE(rt_.allocator->total().peak, budget);
  bool split = false;
  for (const std::string& s : said) {
    std::printf("  %s\n", s.c_str());
    split |= s.rfind("UNet cond and uncond one after the other: batch 2 needs at least", 0) == 0;
  }
  EXPECT_TRUE(split);
}

// ComfyUI's two-stage pattern: stop at step 2 keeping the noise, then continue from step 2
// without adding noise; with euler this is the single run (sigmas[:3] then sigmas[2:]).
TEST_F(NodesSampling, SplitAtStepEqualsOneRun) {
  HostTensor full = advanced(latent_, "enable", 11, 0, 10000, "disable");
  HostTensor first = advanced(latent_, "enable", 11, 0, 2, "enable");
  HostTensor second = advanced(first, "disable", 11, 2, 10000, "disable");
  EXPECT_LE(test::rel_err(second, full), kTol);
  EXPECT_GT(test::rel_err(first, full), 1e-3) << "stopping at step 2 must leave noise";
}

// return_with_leftover_noise disable (force_full_denoise) sets the last kept sigma to 0: a run
// that ends at step 2 finishes with one step from sigma[1] to 0.
TEST_F(NodesSampling, ForceFullDenoiseEndsAtSigmaZero) {
  HostTensor denoised = advanced(latent_, "enable", 5, 0, 2, "disable");
  HostTensor one = advanced(latent_, "enable", 5, 0, 1, "enable");
  HostTensor last = advanced(one, "disable", 5, 1, 2, "disable");
  EXPECT_LE(test::rel_err(denoised, last), kTol);
  HostTensor noisy = advanced(latent_, "enable", 5, 0, 2, "enable");
  EXPECT_GT(test::rel_err(noisy, denoised), 1e-3);
}

// add_noise disable: common_ksampler uses zero noise, so the seed no longer matters (euler
// draws no noise of its own); with noise the seed does.
TEST_F(NodesSampling, AddNoiseDisableIgnoresSeed) {
  HostTensor a = advanced(latent_, "disable", 1, 0, 10000, "disable");
  HostTensor b = advanced(latent_, "disable", 2, 0, 10000, "disable");
  EXPECT_EQ(test::max_abs_diff(a, b), 0.0f);
  HostTensor c = advanced(latent_, "enable", 1, 0, 10000, "disable");
  HostTensor d = advanced(latent_, "enable", 2, 0, 10000, "disable");
  EXPECT_GT(test::rel_err(c, d), 1e-3);
}

// start_at_step at or past the last step: KSampler.sample returns the latent unchanged.
TEST_F(NodesSampling, StartPastLastStepReturnsLatent) {
  HostTensor out = advanced(latent_, "enable", 3, 4, 10000, "disable");
  EXPECT_LE(test::rel_err(out, latent_), 1e-6);
}

// ConditioningCombine is list concatenation; the sampler averages the model outputs of the
// entries (calc_cond_batch: out_conds / out_counts). At cfg 1 one euler step from sigma_max to
// 0 returns the denoised latent, which is linear in the model output, so
// KSampler(combine(a, b)) = (KSampler(a) + KSampler(b)) / 2.
TEST_F(NodesSampling, ConditioningCombineAveragesEntries) {
  NodeInputs in;
  in.links["conditioning_1"] = pos_;
  in.links["conditioning_2"] = pos2_;
  auto both = test::output_as<Conditioning>(h_.run("ConditioningCombine", in));
  ASSERT_TRUE(both);
  ASSERT_EQ(both->entries.size(), 2u);
  EXPECT_EQ(both->entries[0].cond, pos_->entries[0].cond);
  EXPECT_EQ(both->entries[1].cond, pos2_->entries[0].cond);

  Json k = common(1, 1.0);
  k["seed"] = 9;
  k["denoise"] = 1.0;
  HostTensor a = run("KSampler", k, latent_, pos_);
  HostTensor b = run("KSampler", k, latent_, pos2_);
  HostTensor ab = run("KSampler", k, latent_, both);
  HostTensor mean(DType::F32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) mean.f32()[i] = (a.f32()[i] + b.f32()[i]) / 2;
  EXPECT_LE(test::rel_err(ab, mean), kTol);
  EXPECT_GT(test::rel_err(a, b), 0.01) << "the two conditionings must differ";
}

// CLIPSetLastLayer on the tiny SD1 text encoder (2 layers, 4 heads): -1 is the default, -2
// equals encoding with layer -2 through the model API, and a layer beyond the encoder falls
// back to the last layer (sd1_clip.py set_clip_options: abs(layer) > num_layers -> "last").
class NodesCLIPLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_.wire(opts_);
    auto f = SafetensorsFile::open(test::golden_path("tiny-sd1.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status().str();
    file_ = std::move(f).value();
    auto tok = CLIPTokenizer::load(test::clip_vocab_dir());
    ASSERT_TRUE(tok.ok()) << tok.status().str();
    tokenizer_ = std::move(tok).value();
    enc_.kind = kSDClipL;
    enc_.weights = std::make_shared<WeightSet>();
    ASSERT_TRUE(weights_load_prefix(*enc_.weights, *file_, "cond_stage_model.transformer.", DType::F32).ok());
    auto cfg = clip_text_detect(*enc_.weights, 4);
    ASSERT_TRUE(cfg.ok()) << cfg.status().str();
    enc_.config = *cfg;
    CLIPValue clip;
    // SD1's CLIP defaults (sd1_clip.py): layer -1, final norm, rows padded with EOS.
    clip.encoder = std::make_shared<const SDTextEncoder>(
        *model_family_find("sd1"), SDClipDefaults{-1, true, true, true},
        std::vector<SDClipEncoder>{enc_}, tokenizer_);
    clip_ = std::make_shared<const CLIPValue>(std::move(clip));
  }

  std::shared_ptr<const CLIPValue> set_layer(int layer) {
    NodeInputs in;
    in.links["clip"] = clip_;
    in.literals["stop_at_clip_layer"] = layer;
    return test::output_as<CLIPValue>(h_.run("CLIPSetLastLayer", in));
  }

  HostTensor encode(std::shared_ptr<const CLIPValue> clip) {
    NodeInputs in;
    in.links["clip"] = clip;
    in.literals["text"] = kText;
    auto c = test::output_as<Conditioning>(h_.run("CLIPTextEncode", in));
    return c && !c->entries.empty() ? c->entries[0].cond->clone() : HostTensor();
  }

  HostTensor encode_api(int layer) {
    const SDClipEncoder& enc = enc_;
    enc.weights->bind(rt_.backend.get(), rt_.allocator.get());
    CLIPEncodeOptions eo;
    eo.layer = layer;
    eo.layer_final_norm = true;  // SD1 (sd1_clip.py layer_norm_hidden_state=True)
    auto r = clip_text_encode(*rt_.executor, *enc.weights, enc.config,
                              prompt_tokenize(*tokenizer_, kText), eo);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r->cond) : HostTensor();
  }

  static constexpr const char* kText = "a photo of a cat, (red:1.2) hat";
  test::CpuRuntime rt_;
  ExecOptions opts_;
  test::NodeHarness h_{opts_};
  std::unique_ptr<SafetensorsFile> file_;
  std::shared_ptr<const CLIPTokenizer> tokenizer_;
  SDClipEncoder enc_;
  std::shared_ptr<const CLIPValue> clip_;
};

TEST_F(NodesCLIPLayer, MinusOneIsDefault) {
  EXPECT_EQ(test::max_abs_diff(encode(set_layer(-1)), encode(clip_)), 0.0f);
}

TEST_F(NodesCLIPLayer, MinusTwoEqualsModelLayerMinusTwo) {
  HostTensor two = encode(set_layer(-2));
  EXPECT_LE(test::rel_err(two, encode_api(-2)), 1e-6);
  EXPECT_GT(test::rel_err(two, encode(clip_)), 1e-3) << "layer -2 must differ from -1";
}

TEST_F(NodesCLIPLayer, BeyondLayersFallsBackToLast) {
  EXPECT_EQ(test::max_abs_diff(encode(set_layer(-3)), encode(clip_)), 0.0f);
  EXPECT_EQ(test::max_abs_diff(encode(set_layer(-24)), encode(clip_)), 0.0f);
}

}  // namespace
}  // namespace hr
