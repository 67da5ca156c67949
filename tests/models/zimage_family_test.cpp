// The Z-Image family (models/zimage/zimage_family.h) and its DiT component (zimage_model.h):
// detection, the family's data (ComfyUI's ZImage: flow, shift 3, multiplier 1, Flux latents),
// Lumina2's refusal, and the component's run() on diffusers' Z-Image golden
// (tests/data/zimage/dit_golden.safetensors, make_dit_golden.py) with the context taken from
// conditioning entries; make-model's tiny files.
#include "models/zimage/zimage_family.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/conditioning.h"
#include "models/llm/llm_config.h"
#include "models/make_model.h"
#include "models/safetensors.h"
#include "models/zimage/zimage_dit.h"
#include "models/zimage/zimage_make_model.h"
#include "models/zimage/zimage_model.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
const std::vector<int> kGoldenAxes = {8, 4, 4};  // make_dit_golden.py's axes_dims (head dim 16)

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

// The first `tokens` tokens of a [1, L, C] context.
HostTensor first_tokens(const HostTensor& c, int64_t tokens) {
  const int64_t width = c.shape()[2];
  HostTensor out(DType::F32, Shape{1, tokens, width});
  std::memcpy(out.f32(), c.f32(), size_t(tokens * width) * 4);
  return out;
}

CondEntry entry(HostTensor context) {
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(std::move(context));
  return e;
}

std::string golden_path() { return test::data_path("zimage/dit_golden.safetensors"); }

// A file of the given tensors (each [1, 4]) in a temporary path, opened.
std::unique_ptr<SafetensorsFile> file_with(const std::vector<std::string>& names) {
  HostTensor t(DType::F32, Shape{1, 4});
  std::memset(t.f32(), 0, 16);
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for (const std::string& n : names) tensors.push_back({n, &t});
  const fs::path path = fs::temp_directory_path() /
                        ("hr_zimage_family_test_" + std::to_string(getpid()) + ".safetensors");
  EXPECT_TRUE(safetensors_write(path.string(), tensors).ok());
  auto f = SafetensorsFile::open(path.string());
  fs::remove(path);
  EXPECT_TRUE(f.ok()) << f.status().str();
  return f.ok() ? std::move(f).value() : nullptr;
}

TEST(ZImageFamily, IsRegisteredWithComfyUIsSettings) {
  const ModelFamily* f = model_family_find("zimage");
  ASSERT_NE(f, nullptr);
  // supported_models.py ZImage.sampling_settings {"multiplier": 1.0, "shift": 3.0}, FLOW.
  EXPECT_EQ(f->sampling.kind, ModelSamplingSpec::Kind::FLOW);
  EXPECT_EQ(f->sampling.shift, 3.0);
  EXPECT_EQ(f->sampling.multiplier, 1.0);
  // latent_formats.Flux (Lumina2's latent_format).
  EXPECT_EQ(f->latent.channels, 16);
  EXPECT_FLOAT_EQ(f->latent.scale_factor, 0.3611f);
  EXPECT_FLOAT_EQ(f->latent.shift_factor, 0.1159f);
  EXPECT_EQ(f->text_encoder_kinds, std::vector<std::string>{kZImageQwen3});
}

TEST(ZImageFamily, DetectsTheGolden) {
  auto f = SafetensorsFile::open(golden_path());
  ASSERT_TRUE(f.ok()) << f.status().str();
  Result<CheckpointInfo> info = checkpoint_inspect(**f);
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->family_name(), "zimage");
  EXPECT_TRUE(info->has_diffusion);
  EXPECT_EQ(info->diffusion_prefix, "");
  EXPECT_FALSE(info->has_vae);
  EXPECT_TRUE(info->text_encoders.empty());
  ASSERT_TRUE(info->family->settings_describe);
  auto lines = info->family->settings_describe(**f, *info);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0].first, "model sampling");
  EXPECT_NE(lines[0].second.find("shift 3"), std::string::npos) << lines[0].second;
  EXPECT_EQ(lines[1].first, "config");
  EXPECT_NE(lines[1].second.find("dim 32"), std::string::npos) << lines[1].second;
}

TEST(ZImageFamily, DetectsASingleFileCheckpoint) {
  auto f = file_with({"model.diffusion_model.cap_embedder.1.weight",
                      "model.diffusion_model.x_pad_token", "vae.decoder.conv_in.weight",
                      std::string(kZImageQwen3Prefix) + "model.embed_tokens.weight"});
  ASSERT_NE(f, nullptr);
  Result<FamilyDetected> d = model_family_detect(*f);
  ASSERT_TRUE(d.ok()) << d.status().str();
  EXPECT_EQ(d->family->name, "zimage");
  EXPECT_EQ(d->match.diffusion_prefix.value_or("?"), "model.diffusion_model.");
  EXPECT_EQ(d->match.vae_prefix.value_or("?"), "vae.");
  ASSERT_EQ(d->match.text_encoders.size(), 1u);
  EXPECT_EQ(d->match.text_encoders[0].kind, kZImageQwen3);
  EXPECT_EQ(d->match.text_encoders[0].prefix, kZImageQwen3Prefix);
}

// Lumina Image 2.0's NextDiT has cap_embedder but no pad tokens: not Z-Image.
TEST(ZImageFamily, RefusesLumina2WithAHint) {
  auto f = file_with({"cap_embedder.1.weight", "noise_refiner.0.attention.qkv.weight"});
  ASSERT_NE(f, nullptr);
  Result<FamilyDetected> d = model_family_detect(*f);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::UNSUPPORTED);
  EXPECT_NE(d.status().str().find("Lumina Image 2.0"), std::string::npos) << d.status().str();
}

class ZImageModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::open(golden_path());
    ASSERT_TRUE(f.ok()) << f.status().str();
    golden_ = std::move(f).value();
    Result<std::unique_ptr<LoadedModel>> m = model_load(golden_path());
    ASSERT_TRUE(m.ok()) << m.status().str();
    loaded_ = std::move(m).value();
    model_ = zimage_model(*loaded_);
    ASSERT_NE(model_, nullptr);
  }
  std::unique_ptr<SafetensorsFile> golden_;
  std::unique_ptr<LoadedModel> loaded_;
  ZImageModel* model_ = nullptr;
  Cpu cpu_;
};

// The golden's head width (16) does not fit Z-Image's axes: the model loads and refuses to run.
TEST_F(ZImageModelTest, RefusesToRunWithoutAxes) {
  EXPECT_TRUE(model_->config.axes_dim.empty());
  HostTensor x = load(*golden_, "golden.a.x"), sigma = load(*golden_, "golden.a.sigma");
  CondEntry e = entry(load(*golden_, "golden.a.context"));
  const CondEntry* es[] = {&e};
  Result<HostTensor> out = model_->run(cpu_.ex, model_->store, x, sigma, es);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().str().find("RoPE axes"), std::string::npos) << out.status().str();
}

// Batch b (two samples) as two conditioning entries, one row each: one call, diffusers' output.
TEST_F(ZImageModelTest, RunMatchesDiffusersFromEntries) {
  model_->config.axes_dim = kGoldenAxes;
  for (const char* name : {"a", "b"}) {
    const std::string p = std::string("golden.") + name;
    HostTensor x = load(*golden_, p + ".x"), sigma = load(*golden_, p + ".sigma");
    HostTensor ctx = load(*golden_, p + ".context"), ref = load(*golden_, p + ".out");
    std::vector<CondEntry> es;
    for (int64_t i = 0; i < x.shape()[0]; ++i) es.push_back(entry(tensor_rows0(ctx, i, 1)));
    std::vector<const CondEntry*> ptrs;
    for (const CondEntry& e : es) ptrs.push_back(&e);
    Result<HostTensor> out = model_->run(cpu_.ex, model_->store, x, sigma, ptrs);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_EQ(out->shape(), ref.shape());
    const double err = test::rel_err(*out, ref);
    std::printf("zimage model case %s rel error %.3g\n", name, err);
    EXPECT_LT(err, kRelTol) << name;
  }
}

// Entries of different caption lengths run one call each (Note [z-image entries]): each half of
// the result equals a call on that sample and its own caption alone.
TEST_F(ZImageModelTest, EntriesOfOtherLengthsRunApart) {
  model_->config.axes_dim = kGoldenAxes;
  HostTensor x = load(*golden_, "golden.b.x"), sigma = load(*golden_, "golden.b.sigma");
  HostTensor ctx = load(*golden_, "golden.b.context");
  const int64_t len = ctx.shape()[1];
  ASSERT_GE(len, 2);
  CondEntry e0 = entry(tensor_rows0(ctx, 0, 1));
  CondEntry e1 = entry(first_tokens(tensor_rows0(ctx, 1, 1), len - 1));
  const CondEntry* es[] = {&e0, &e1};
  Result<HostTensor> out = model_->run(cpu_.ex, model_->store, x, sigma, es);
  ASSERT_TRUE(out.ok()) << out.status().str();
  for (int64_t i = 0; i < 2; ++i) {
    HostTensor xi = tensor_rows0(x, i, 1), si = tensor_rows0(sigma, i, 1);
    ZImageInputs in{&xi, &si, i == 0 ? e0.cond.get() : e1.cond.get()};
    Result<HostTensor> alone =
        zimage_dit_run(cpu_.ex, model_->config, model_->store, DType::F32, in);
    ASSERT_TRUE(alone.ok()) << alone.status().str();
    EXPECT_LT(test::rel_err(tensor_rows0(*out, i, 1), *alone), 1e-6) << "sample " << i;
  }
  // The full-length row is also diffusers' row.
  EXPECT_LT(test::rel_err(tensor_rows0(*out, 0, 1),
                          tensor_rows0(load(*golden_, "golden.b.out"), 0, 1)),
            kRelTol);
}

// UNETLoader's weight_dtype fp8_e4m3fn: the DiT's weights stay fp8 (Note [fp8 at load]) and the
// call equals an f32 call on the same weights rounded to e4m3 (then about 9 % from the f32
// output on this tiny model).
TEST_F(ZImageModelTest, Fp8WeightsAtLoadEqualF32OnRoundedWeights) {
  LoadOptions o;
  o.diffusion_weight_dtype = DType::F8_E4M3;
  Result<std::unique_ptr<LoadedModel>> m = model_load(golden_path(), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  ZImageModel* fp8 = zimage_model(**m);
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(fp8->config.storage, nullptr);
  EXPECT_FALSE(fp8->config.storage_key.empty());
  EXPECT_EQ(fp8->store.find("layers.0.attention.qkv.weight")->dtype(), DType::F8_E4M3);
  fp8->config.axes_dim = kGoldenAxes;
  ZImageConfig rounded_cfg = fp8->config;
  rounded_cfg.storage = nullptr;
  rounded_cfg.storage_key.clear();
  WeightSet rounded;  // the fp8 store's values as f32
  for (const std::string& name : fp8->store.names()) {
    const HostTensor* t = fp8->store.find(name);
    rounded.put(name, dtype_is_float(t->dtype()) ? t->to(DType::F32) : t->clone());
  }
  HostTensor x = load(*golden_, "golden.a.x"), sigma = load(*golden_, "golden.a.sigma");
  HostTensor ctx = load(*golden_, "golden.a.context");
  CondEntry e = entry(ctx.clone());
  const CondEntry* es[] = {&e};
  Result<HostTensor> a = fp8->run(cpu_.ex, fp8->store, x, sigma, es);
  ASSERT_TRUE(a.ok()) << a.status().str();
  ZImageInputs in{&x, &sigma, &ctx};
  Result<HostTensor> b = zimage_dit_run(cpu_.ex, rounded_cfg, rounded, DType::F32, in);
  ASSERT_TRUE(b.ok()) << b.status().str();
  const double err = test::rel_err(*a, *b);
  std::printf("zimage fp8 e4m3 weights vs f32 on rounded weights rel error %.3g\n", err);
  EXPECT_LT(err, 1e-5);
  EXPECT_GT(test::rel_err(*a, load(*golden_, "golden.a.out")), 1e-3);  // fp8 did round
}

TEST_F(ZImageModelTest, RefusesAContextOfTheWrongWidth) {
  model_->config.axes_dim = kGoldenAxes;
  HostTensor x = load(*golden_, "golden.a.x"), sigma = load(*golden_, "golden.a.sigma");
  CondEntry e = entry(HostTensor(DType::F32, Shape{1, 3, model_->config.cap_feat_dim + 1}));
  std::vector<const CondEntry*> es(size_t(x.shape()[0]), &e);
  Result<HostTensor> out = model_->run(cpu_.ex, model_->store, x, sigma, es);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), ErrorCode::INVALID_ARGUMENT);
}

// make-model's tiny folder: each file is detected as its component, with the configuration it
// was written from.
TEST(ZImageMakeModel, TinyFilesDetectAsTheirComponents) {
  const fs::path dir = fs::temp_directory_path() / ("hr_zimage_make_" + std::to_string(getpid()));
  MakeModelSpec spec;
  spec.arch = "zimage";
  spec.size = ModelSize::TINY;
  Result<std::vector<MadeFile>> made = zimage_make_model_write(spec, dir.string());
  ASSERT_TRUE(made.ok()) << made.status().str();
  ASSERT_EQ(made->size(), 3u);
  const ZImageMakeConfig cfg = zimage_make_config(ModelSize::TINY);
  auto inspect = [&](const char* name) {
    auto f = SafetensorsFile::open((dir / name).string());
    EXPECT_TRUE(f.ok()) << f.status().str();
    std::shared_ptr<const SafetensorsFile> file = std::move(f).value();
    Result<CheckpointInfo> info = checkpoint_inspect(*file);
    EXPECT_TRUE(info.ok()) << info.status().str();
    return std::make_pair(file, std::move(info).value());
  };
  auto [dit_file, dit] = inspect("diffusion_models/z_image_turbo_bf16.safetensors");
  EXPECT_EQ(dit.family_name(), "zimage");
  EXPECT_EQ(dit.storage_dtype, DType::BF16);
  Result<ZImageConfig> dc = zimage_config_detect(*dit_file, "");
  ASSERT_TRUE(dc.ok()) << dc.status().str();
  EXPECT_EQ(*dc, cfg.dit);
  EXPECT_EQ(dc->axes_dim, (std::vector<int>{32, 48, 48}));  // head width 128
  auto [te_file, te] = inspect("text_encoders/qwen_3_4b.safetensors");
  ASSERT_EQ(te.text_encoders.size(), 1u);
  EXPECT_EQ(te.text_encoders[0].kind, kZImageQwen3);
  Result<LLMConfig> lc = llm_config_detect(*te_file, "");
  ASSERT_TRUE(lc.ok()) << lc.status().str();
  EXPECT_EQ(lc->vocab, 151936);
  EXPECT_EQ(lc->hidden, dc->cap_feat_dim);
  EXPECT_EQ(lc->layers, 2);
  auto [vae_file, vae] = inspect("vae/ae.safetensors");
  EXPECT_TRUE(vae.has_vae);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hr
