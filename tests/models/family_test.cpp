// The model-family registry (Note [model families]): detection of every SD variant and of bare
// component files written by make_model, the registry's order and messages, and a folder-less
// toy family registered here that detection and loading take without changes elsewhere.
#include "models/weight_load.h"
#include "models/family.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/checkpoint.h"
#include "models/make_model.h"
#include "models/sd/sd_unet.h"
#include "models/sd/sd_vae.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class FamilyRegistry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hr_family_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (const char* arch : {"sd1", "sd2", "sdxl", "sdxl-refiner"}) {
      MakeModelSpec spec;
      spec.arch = arch;
      spec.dtype = DType::F32;
      Result<uint64_t> n = make_model_write(spec, path_of(arch));
      ASSERT_TRUE(n.ok()) << n.status().str();
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string path_of(const std::string& name) {
    return (dir_ / (name + ".safetensors")).string();
  }

  // The tensors of `arch`'s checkpoint under `prefix`, with the prefix removed, as a new file.
  static std::string derive(const std::string& arch, const std::string& prefix,
                            const std::string& name) {
    auto src = SafetensorsFile::open(path_of(arch));
    EXPECT_TRUE(src.ok()) << src.status().str();
    std::vector<HostTensor> ts;
    std::vector<std::string> names;
    for (const SafetensorsEntry& e : (*src)->entries()) {
      if (e.name.rfind(prefix, 0) != 0) continue;
      ts.push_back((*src)->load(e.name).value());
      names.push_back(e.name.substr(prefix.size()));
    }
    std::vector<std::pair<std::string, const HostTensor*>> list;
    for (size_t i = 0; i < ts.size(); ++i) list.push_back({names[i], &ts[i]});
    Status s = safetensors_write(path_of(name), list, {});
    EXPECT_TRUE(s.ok()) << s.str();
    return path_of(name);
  }

  static CheckpointInfo inspect(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    EXPECT_TRUE(f.ok()) << f.status().str();
    if (!f.ok()) return {};
    auto info = checkpoint_inspect(**f);
    EXPECT_TRUE(info.ok()) << info.status().str();
    return info.ok() ? std::move(info).value() : CheckpointInfo{};
  }

  static fs::path dir_;
};
fs::path FamilyRegistry::dir_;

TEST_F(FamilyRegistry, BuiltInFamiliesInDetectionOrder) {
  std::vector<const ModelFamily*> fams = model_families();
  ASSERT_GE(fams.size(), 5u);
  EXPECT_EQ(fams[0]->name, "sdxl");
  EXPECT_EQ(fams[1]->name, "sd2");
  EXPECT_EQ(fams[2]->name, "sd1");
  EXPECT_EQ(fams[3]->name, "flux");
  EXPECT_EQ(fams[4]->name, "flux-schnell");
  for (const ModelFamily* f : fams) {
    EXPECT_EQ(f->latent.rgb_factors.size(), size_t(f->latent.channels)) << f->name;
    EXPECT_TRUE(f->detect && f->diffusion_create && f->autoencoder_create) << f->name;
    EXPECT_TRUE(f->text_encoder_create) << f->name;
    EXPECT_EQ(model_family_find(f->name), f);
  }
  EXPECT_EQ(model_family_find("no-such-family"), nullptr);
  EXPECT_FLOAT_EQ(model_family_find("sd1")->latent.scale_factor, 0.18215f);
  EXPECT_FLOAT_EQ(model_family_find("sd2")->latent.scale_factor, 0.18215f);
  EXPECT_FLOAT_EQ(model_family_find("sdxl")->latent.scale_factor, 0.13025f);
  EXPECT_EQ(model_family_find("sdxl")->sampling.kind, ModelSamplingSpec::Kind::DISCRETE);
}

TEST_F(FamilyRegistry, DetectsFullCheckpoints) {
  CheckpointInfo sd1 = inspect(path_of("sd1"));
  EXPECT_EQ(sd1.family_name(), "sd1");
  EXPECT_TRUE(sd1.has_diffusion && sd1.has_vae);
  EXPECT_EQ(sd1.diffusion_prefix, "model.diffusion_model.");
  EXPECT_EQ(sd1.vae_prefix, "first_stage_model.");
  ASSERT_EQ(sd1.text_encoders.size(), 1u);
  EXPECT_EQ(sd1.text_encoders[0].kind, "clip_l");
  EXPECT_EQ(sd1.text_encoders[0].prefix, "cond_stage_model.transformer.");

  CheckpointInfo sd2 = inspect(path_of("sd2"));
  EXPECT_EQ(sd2.family_name(), "sd2");
  ASSERT_EQ(sd2.text_encoders.size(), 1u);
  EXPECT_EQ(sd2.text_encoders[0].kind, "openclip_h");
  EXPECT_EQ(sd2.text_encoders[0].prefix, "cond_stage_model.model.");

  CheckpointInfo xl = inspect(path_of("sdxl"));
  EXPECT_EQ(xl.family_name(), "sdxl");
  ASSERT_EQ(xl.text_encoders.size(), 2u);
  EXPECT_EQ(xl.text_encoders[0].kind, "clip_l");
  EXPECT_EQ(xl.text_encoders[1].kind, "openclip_bigg");
  EXPECT_EQ(xl.text_encoders[1].prefix, "conditioner.embedders.1.model.");

  // The refiner: bigG alone, under the first embedder.
  CheckpointInfo rf = inspect(path_of("sdxl-refiner"));
  EXPECT_EQ(rf.family_name(), "sdxl");
  ASSERT_EQ(rf.text_encoders.size(), 1u);
  EXPECT_EQ(rf.text_encoders[0].kind, "openclip_bigg");
  EXPECT_EQ(rf.text_encoders[0].prefix, "conditioner.embedders.0.model.");
  EXPECT_NE(rf.str().find("family sdxl"), std::string::npos) << rf.str();
}

TEST_F(FamilyRegistry, DetectsBareComponentFiles) {
  // Diffusion-model-only files: SD1 by its conv proj_in, SD2 by its linear one, SDXL by label_emb.
  for (const char* arch : {"sd1", "sd2", "sdxl"}) {
    CheckpointInfo u =
        inspect(derive(arch, "model.diffusion_model.", std::string(arch) + "_unet"));
    EXPECT_EQ(u.family_name(), arch);
    EXPECT_TRUE(u.has_diffusion);
    EXPECT_EQ(u.diffusion_prefix, "");
    EXPECT_FALSE(u.has_vae);
    EXPECT_TRUE(u.text_encoders.empty());
  }

  // A VAE alone does not tell its family; the last SD entry's factories load it.
  CheckpointInfo v = inspect(derive("sd1", "first_stage_model.", "vae"));
  EXPECT_EQ(v.family_name(), "unknown");
  EXPECT_FALSE(v.family_known);
  ASSERT_NE(v.family, nullptr);
  EXPECT_EQ(v.family->name, "sd1");
  EXPECT_TRUE(v.has_vae);
  EXPECT_EQ(v.vae_prefix, "");
  EXPECT_FALSE(v.has_diffusion);
  EXPECT_NE(v.str().find("family unknown"), std::string::npos) << v.str();
  auto vm = model_load(path_of("vae"));
  ASSERT_TRUE(vm.ok()) << vm.status().str();
  EXPECT_EQ((*vm)->diffusion, nullptr);
  ASSERT_NE((*vm)->vae, nullptr);
  EXPECT_EQ((*vm)->vae->downscale(), 8);
  EXPECT_EQ((*vm)->vae->latent_channels(), 4);

  // Text-encoder-only files: the kind from the key layout and the width.
  CheckpointInfo l = inspect(derive("sd1", "cond_stage_model.transformer.", "clip_l"));
  EXPECT_EQ(l.family_name(), "sd1");
  ASSERT_EQ(l.text_encoders.size(), 1u);
  EXPECT_EQ(l.text_encoders[0].kind, "clip_l");
  EXPECT_EQ(l.text_encoders[0].prefix, "");
  CheckpointInfo h = inspect(derive("sd2", "cond_stage_model.model.", "clip_h"));
  EXPECT_EQ(h.family_name(), "sd2");
  ASSERT_EQ(h.text_encoders.size(), 1u);
  EXPECT_EQ(h.text_encoders[0].kind, "openclip_h");
  CheckpointInfo g = inspect(derive("sdxl", "conditioner.embedders.1.model.", "clip_g"));
  ASSERT_EQ(g.text_encoders.size(), 1u);
  // The tiny bigG is 32 wide, not 1280: by its width it reads as OpenCLIP-H, as before.
  EXPECT_EQ(g.text_encoders[0].kind, "openclip_h");
  EXPECT_EQ(g.family_name(), "sd2");
}

TEST_F(FamilyRegistry, LoadsComponentsThroughTheFamily) {
  LoadOptions o;
  o.num_head_channels = 16;
  auto m = model_load(path_of("sdxl"), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  EXPECT_EQ((*m)->family().name, "sdxl");
  ASSERT_NE((*m)->diffusion, nullptr);
  ASSERT_NE((*m)->vae, nullptr);
  EXPECT_EQ(&(*m)->diffusion->family(), (*m)->info.family);
  EXPECT_EQ((*m)->diffusion->sampling().prediction, Prediction::EPS);
  ASSERT_NE(sd_unet(**m), nullptr);
  EXPECT_EQ(sd_unet(**m)->config.num_head_channels, 16);
  EXPECT_GT(sd_unet(**m)->config.adm_in_channels, 0);
  auto te = text_encoder_load((*m)->file, (*m)->info, o);
  ASSERT_TRUE(te.ok()) << te.status().str();
  EXPECT_EQ((*te)->parts(), (std::vector<std::string>{"l", "g"}));

  o.prediction = Prediction::V;
  auto v = model_load(path_of("sd1"), o);
  ASSERT_TRUE(v.ok()) << v.status().str();
  EXPECT_EQ((*v)->diffusion->sampling().prediction, Prediction::V);
}

TEST_F(FamilyRegistry, UnsupportedFileNamesEveryFamilysKeys) {
  HostTensor t(DType::F32, Shape{2});
  std::vector<std::pair<std::string, const HostTensor*>> list = {{"something.else", &t}};
  ASSERT_TRUE(safetensors_write(path_of("other"), list, {}).ok());
  auto f = SafetensorsFile::open(path_of("other"));
  ASSERT_TRUE(f.ok());
  auto info = checkpoint_inspect(**f);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), ErrorCode::UNSUPPORTED);
  const std::string& msg = info.status().message();
  EXPECT_NE(
      msg.find("not a supported Stable Diffusion, Flux.1 or Z-Image checkpoint. Expected a UNet"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Found 1 tensors: 'something.else'"), std::string::npos) << msg;
}

// A toy family with no folder: its own key, latent format, sampling and components. Detection
// and loading take it through the registry alone.
struct ToyDiffusion final : DiffusionModel {
  const ModelFamily* fam;
  WeightSet store;
  explicit ToyDiffusion(const ModelFamily& f) : fam(&f) {}
  const ModelFamily& family() const override { return *fam; }
  WeightSet& weights() override { return store; }
  ModelSamplingSpec sampling() const override { return fam->sampling; }
  Result<uint64_t> min_device_bytes(Executor&, const Shape&, int64_t) override { return 0; }
  Result<HostTensor> run(Executor&, WeightSource&, const HostTensor& x, const HostTensor&,
                         std::span<const CondEntry* const>) override {
    return HostTensor(DType::F32, x.shape());
  }
};

ModelFamily toy_family() {
  ModelFamily f;
  f.name = "toy";
  f.display_name = "Toy";
  f.diffusion_name = "dit";
  f.detect = [](const SafetensorsFile& file) -> std::optional<FamilyMatch> {
    if (!file.contains("toy_model.scale")) return std::nullopt;
    FamilyMatch m;
    m.diffusion_prefix = "toy_model.";
    return m;
  };
  f.expected_keys = "a toy ('toy_model.scale')";
  f.latent = LatentFormat{16, 0.5f, std::vector<std::array<float, 3>>(16, {0.1f, 0.1f, 0.1f}), {}};
  f.sampling = ModelSamplingSpec{ModelSamplingSpec::Kind::FLOW, Prediction::EPS, 3.0};
  f.diffusion_create = [](const ComponentLoad& load) -> Result<std::unique_ptr<DiffusionModel>> {
    auto m = std::make_unique<ToyDiffusion>(*load.info.family);
    HR_TRY(weights_load_prefix(m->store, load.file, load.info.diffusion_prefix, DType::F32));
    return std::unique_ptr<DiffusionModel>(std::move(m));
  };
  return f;
}

TEST_F(FamilyRegistry, ToyFamilyIsDetectedAndLoaded) {
  ASSERT_TRUE(model_family_register(toy_family()).ok());
  EXPECT_FALSE(model_family_register(toy_family()).ok());  // a name is registered once
  HostTensor scale(DType::F32, Shape{1});
  scale.f32()[0] = 2.f;
  std::vector<std::pair<std::string, const HostTensor*>> list = {{"toy_model.scale", &scale}};
  ASSERT_TRUE(safetensors_write(path_of("toy"), list, {}).ok());

  CheckpointInfo info = inspect(path_of("toy"));
  EXPECT_EQ(info.family_name(), "toy");
  EXPECT_NE(info.str().find("components: dit 'toy_model.'"), std::string::npos) << info.str();
  auto m = model_load(path_of("toy"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  ASSERT_NE((*m)->diffusion, nullptr);
  EXPECT_EQ((*m)->diffusion->weights().size(), 1u);
  EXPECT_EQ((*m)->diffusion->sampling().kind, ModelSamplingSpec::Kind::FLOW);
  EXPECT_EQ((*m)->latent_format().channels, 16);
  // No text encoder in the file; a family without a factory says so instead of crashing.
  EXPECT_FALSE(text_encoder_load((*m)->file, (*m)->info).ok());
  // The SD files still detect as before with the toy registered after them.
  EXPECT_EQ(inspect(path_of("sd1")).family_name(), "sd1");
  model_family_unregister("toy");
  EXPECT_EQ(model_family_find("toy"), nullptr);
}

}  // namespace
}  // namespace hr
