// Checkpoint tests: component, family and prediction detection on the tiny checkpoints and on
// derived files (bare UNet / VAE / CLIP files, metadata), the unsupported-file message, and the
// LoadedModel runners against the goldens.
#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "models/sd/sd_vae.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr_checkpoint_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::unique_ptr<SafetensorsFile> open(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    EXPECT_TRUE(f.ok()) << f.status().str();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  // Writes the tensors of `src` whose names start with `prefix` (prefix stripped, replaced by
  // `new_prefix`) to a new file in the temporary directory.
  std::string derive(const SafetensorsFile& src, const std::string& prefix,
                     const std::string& name, const std::string& new_prefix = "",
                     const std::map<std::string, std::string>& metadata = {}) {
    std::vector<HostTensor> ts;
    std::vector<std::string> names;
    for (const SafetensorsEntry& e : src.entries()) {
      if (e.name.rfind(prefix, 0) != 0) continue;
      auto t = src.load(e.name);
      EXPECT_TRUE(t.ok());
      ts.push_back(std::move(t).value());
      names.push_back(new_prefix + e.name.substr(prefix.size()));
    }
    std::vector<std::pair<std::string, const HostTensor*>> list;
    for (size_t i = 0; i < ts.size(); ++i) list.push_back({names[i], &ts[i]});
    std::string path = (dir_ / name).string();
    Status s = safetensors_write(path, list, metadata);
    EXPECT_TRUE(s.ok()) << s.str();
    return path;
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, InspectsTinySD1) {
  auto f = open(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(f);
  auto info = checkpoint_inspect(*f);
  ASSERT_TRUE(info.ok()) << info.status().str();
  std::printf("%s\n", info->str().c_str());
  EXPECT_EQ(info->family_name(), "sd1");
  EXPECT_EQ(info->prediction, Prediction::EPS);
  EXPECT_NE(info->prediction_source.find("tiny-sd1.yaml"), std::string::npos);
  EXPECT_EQ(info->storage_dtype, DType::F16);
  EXPECT_TRUE(info->has_diffusion);
  EXPECT_EQ(info->diffusion_prefix, "model.diffusion_model.");
  EXPECT_TRUE(info->has_vae);
  EXPECT_EQ(info->vae_prefix, "first_stage_model.");
  ASSERT_EQ(info->text_encoders.size(), 1u);
  EXPECT_EQ(info->text_encoders[0].kind, "clip_l");
  EXPECT_EQ(info->text_encoders[0].prefix, "cond_stage_model.transformer.");
  EXPECT_FLOAT_EQ(info->family->latent.scale_factor, 0.18215f);

  auto v = checkpoint_inspect(*f, Prediction::V);  // caller override (SD2 768-v style)
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->prediction, Prediction::V);
}

TEST_F(CheckpointTest, InspectsTinySDXL) {
  auto f = open(test::golden_path("tiny-sdxl.safetensors"));
  ASSERT_TRUE(f);
  auto info = checkpoint_inspect(*f);
  ASSERT_TRUE(info.ok()) << info.status().str();
  std::printf("%s\n", info->str().c_str());
  EXPECT_EQ(info->family_name(), "sdxl");
  EXPECT_TRUE(info->has_diffusion);
  EXPECT_TRUE(info->has_vae);
  ASSERT_EQ(info->text_encoders.size(), 2u);
  EXPECT_EQ(info->text_encoders[0].kind, "clip_l");
  EXPECT_EQ(info->text_encoders[0].prefix, "conditioner.embedders.0.transformer.");
  EXPECT_EQ(info->text_encoders[1].kind, "openclip_bigg");
  EXPECT_EQ(info->text_encoders[1].prefix, "conditioner.embedders.1.model.");
  EXPECT_FLOAT_EQ(info->family->latent.scale_factor, 0.13025f);
}

TEST_F(CheckpointTest, UnsupportedFileListsExpectedAndFoundKeys) {
  auto f = open(test::golden_path("golden-clip.safetensors"));
  ASSERT_TRUE(f);
  auto info = checkpoint_inspect(*f);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), ErrorCode::UNSUPPORTED);
  const std::string& m = info.status().message();
  std::printf("%s\n", m.c_str());
  EXPECT_NE(m.find("model.diffusion_model.input_blocks.0.0.weight"), std::string::npos);
  EXPECT_NE(m.find("first_stage_model.decoder.conv_in.weight"), std::string::npos);
  EXPECT_NE(m.find("cond_stage_model.transformer."), std::string::npos);
  EXPECT_NE(m.find("conditioner.embedders.1.model."), std::string::npos);
  EXPECT_NE(m.find(f->entries()[0].name), std::string::npos);  // a found key
  EXPECT_NE(m.find("Found 70 tensors"), std::string::npos);
}

// Bare component files (ComfyUI UNETLoader / VAELoader / CLIPLoader) and SD2-style prefixes.
TEST_F(CheckpointTest, BareComponentFiles) {
  auto sd1 = open(test::golden_path("tiny-sd1.safetensors"));
  auto sdxl = open(test::golden_path("tiny-sdxl.safetensors"));
  ASSERT_TRUE(sd1 && sdxl);

  auto unet = open(derive(*sd1, "model.diffusion_model.", "unet.safetensors"));
  auto ui = checkpoint_inspect(*unet);
  ASSERT_TRUE(ui.ok()) << ui.status().str();
  EXPECT_TRUE(ui->has_diffusion);
  EXPECT_EQ(ui->diffusion_prefix, "");
  EXPECT_FALSE(ui->has_vae);
  EXPECT_EQ(ui->family_name(), "sd1");

  auto xl_unet = open(derive(*sdxl, "model.diffusion_model.", "xl_unet.safetensors"));
  auto xi = checkpoint_inspect(*xl_unet);
  ASSERT_TRUE(xi.ok());
  EXPECT_EQ(xi->family_name(), "sdxl");  // label_emb

  auto vae = open(derive(*sd1, "first_stage_model.", "vae.safetensors"));
  auto vi = checkpoint_inspect(*vae);
  ASSERT_TRUE(vi.ok()) << vi.status().str();
  EXPECT_TRUE(vi->has_vae);
  EXPECT_EQ(vi->vae_prefix, "");
  EXPECT_FALSE(vi->has_diffusion);
  EXPECT_EQ(vi->family_name(), "unknown");

  auto clip = open(derive(*sd1, "cond_stage_model.transformer.", "clip_l.safetensors"));
  auto ci = checkpoint_inspect(*clip);
  ASSERT_TRUE(ci.ok()) << ci.status().str();
  ASSERT_EQ(ci->text_encoders.size(), 1u);
  EXPECT_EQ(ci->text_encoders[0].kind, "clip_l");
  EXPECT_EQ(ci->text_encoders[0].prefix, "");

  auto bigg = open(derive(*sdxl, "conditioner.embedders.1.model.", "clip_g.safetensors"));
  auto gi = checkpoint_inspect(*bigg);
  ASSERT_TRUE(gi.ok()) << gi.status().str();
  ASSERT_EQ(gi->text_encoders.size(), 1u);
  EXPECT_EQ(gi->text_encoders[0].prefix, "");

  // An OpenCLIP text tower under SD2's prefix reads as SD2 (OpenCLIP-H); metadata can name
  // v-prediction, and the caller's override wins over it.
  std::string sd2_path = derive(*sdxl, "conditioner.embedders.1.model.", "sd2_te.safetensors",
                                "cond_stage_model.model.");
  auto sd2_te = open(sd2_path);
  auto ti = checkpoint_inspect(*sd2_te);
  ASSERT_TRUE(ti.ok());
  ASSERT_EQ(ti->text_encoders.size(), 1u);
  EXPECT_EQ(ti->text_encoders[0].kind, "openclip_h");
  EXPECT_EQ(ti->family_name(), "sd2");

  auto vpred = open(derive(*sd1, "model.diffusion_model.", "vpred.safetensors",
                           "model.diffusion_model.", {{"modelspec.prediction_type", "v"}}));
  auto pi = checkpoint_inspect(*vpred);
  ASSERT_TRUE(pi.ok());
  EXPECT_EQ(pi->prediction, Prediction::V);
  EXPECT_EQ(pi->prediction_source, "metadata modelspec.prediction_type");
  auto pe = checkpoint_inspect(*vpred, Prediction::EPS);
  ASSERT_TRUE(pe.ok());
  EXPECT_EQ(pe->prediction, Prediction::EPS);
}

// model_load + the LoadedModel runners reproduce the goldens (f32); see Note [golden tolerance]
// in unet_test.cpp.
TEST_F(CheckpointTest, LoadedModelRunsGoldens) {
  auto gold = open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(gold);
  auto get = [&](const std::string& n) { return gold->load(n, DType::F32).value(); };
  auto backend = cpu_backend_create();
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend, alloc, executor_policies_default(*backend));

  auto m = model_load(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  LoadedModel& sd1 = **m;
  EXPECT_EQ(sd1.family().name, "sd1");
  EXPECT_EQ(sd_unet(sd1)->store.size(), 684u);
  EXPECT_EQ(sd_vae(sd1)->store.size(), 244u);
  auto out = unet_run(ex, *sd_unet(sd1), get("unet.sd1.x"), get("unet.sd1.timesteps"),
                      get("unet.sd1.context"));
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_LT(test::rel_err(*out, get("unet.sd1.out")), 1e-4);
  auto img = vae_decode(ex, *sd_vae(sd1), get("vae.sd1.decode.latent"));
  ASSERT_TRUE(img.ok()) << img.status().str();
  EXPECT_LT(test::rel_err(*img, get("vae.sd1.decode.image")), 1e-4);
  auto mom = vae_encode(ex, *sd_vae(sd1), get("vae.sd1.encode.image"));
  ASSERT_TRUE(mom.ok()) << mom.status().str();
  EXPECT_LT(test::rel_err(mom->mean, get("vae.sd1.encode.mean")), 1e-4);

  // The tiny SDXL file carries no head metadata: the detected default (head dim =
  // model_channels below 64) gives the README's head dim 32.
  auto mx = model_load(test::golden_path("tiny-sdxl.safetensors"));
  ASSERT_TRUE(mx.ok()) << mx.status().str();
  LoadedModel& xl = **mx;
  EXPECT_EQ(sd_unet(xl)->config.num_head_channels, 32);
  HostTensor y = get("unet.sdxl.y");
  auto ox = unet_run(ex, *sd_unet(xl), get("unet.sdxl.x"), get("unet.sdxl.timesteps"),
                     get("unet.sdxl.context"), &y);
  ASSERT_TRUE(ox.ok()) << ox.status().str();
  EXPECT_LT(test::rel_err(*ox, get("unet.sdxl.out")), 1e-4);

  // Options: heads override, VAE only.
  LoadOptions o;
  o.num_head_channels = 64;
  o.load_vae = false;
  auto mo = model_load(test::golden_path("tiny-sdxl.safetensors"), o);
  ASSERT_TRUE(mo.ok());
  EXPECT_EQ(sd_unet(**mo)->config.num_head_channels, 64);
  EXPECT_EQ(sd_unet(**mo)->config.num_heads, -1);
  EXPECT_EQ((*mo)->vae, nullptr);
  EXPECT_EQ(sd_vae(**mo), nullptr);
}

// Loading in f16 converts the weights; the graph then runs in f16 where the backend supports it.
TEST_F(CheckpointTest, LoadsInHalfPrecision) {
  LoadOptions o;
  o.diffusion_dtype = DType::F16;
  o.vae_dtype = DType::BF16;
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  const HostTensor* w = sd_unet(**m)->store.find("input_blocks.0.0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype(), DType::F16);
  const HostTensor* v = sd_vae(**m)->store.find("decoder.conv_in.weight");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->dtype(), DType::BF16);
  auto g = unet_graph(sd_unet(**m)->config, 1, 8, 8, 77, DType::F16);
  ASSERT_TRUE(g.ok()) << g.status().str();
}

}  // namespace
}  // namespace hr
