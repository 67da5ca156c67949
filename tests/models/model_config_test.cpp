// Settings the weights cannot show: config files beside checkpoints (LDM and SGM layouts),
// headroom metadata, their order, and clear errors for bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "models/model_config.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class ModelConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("hr_model_config_{}_{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()
                                                       ->current_test_info()
                                                       ->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  // A small SD2-shaped UNet-less file: a bare VAE is enough for inspection, with metadata.
  std::string checkpoint(const std::string& name, std::map<std::string, std::string> meta) {
    HostTensor w(DType::F32, Shape{4, 4, 3, 3});
    std::string path = (dir_ / name).string();
    Status s = safetensors_write(path,
                                 {{"decoder.conv_in.weight", &w}, {"encoder.conv_in.weight", &w}},
                                 meta);
    EXPECT_TRUE(s.ok()) << s.str();
    return path;
  }
  fs::path dir_;
};

TEST_F(ModelConfigTest, TinySD1ConfigGivesHeads) {
  auto s = model_config_read(test::golden_path("tiny-sd1.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().str();
  ASSERT_TRUE(s->unet_num_heads.value);
  EXPECT_EQ(*s->unet_num_heads.value, 8);
  EXPECT_FALSE(s->unet_num_head_channels.value);
  EXPECT_EQ(s->text_encoder_heads_at(0), 4);
  EXPECT_EQ(s->text_encoder_heads_at(1), 0);
  ASSERT_TRUE(s->prediction.value);
  EXPECT_EQ(*s->prediction.value, Prediction::EPS);
  EXPECT_NE(s->prediction.source.find("tiny-sd1.yaml"), std::string::npos);
  EXPECT_NE(s->prediction.source.find("model.params.parameterization"), std::string::npos);
}

TEST_F(ModelConfigTest, TinySDXLConfigSGMLayout) {
  auto s = model_config_read(test::golden_path("tiny-sdxl.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().str();
  ASSERT_TRUE(s->unet_num_head_channels.value);
  EXPECT_EQ(*s->unet_num_head_channels.value, 32);
  EXPECT_NE(s->unet_num_head_channels.source.find("network_config"), std::string::npos);
  EXPECT_EQ(s->text_encoder_heads_at(0), 4);
  EXPECT_EQ(s->text_encoder_heads_at(1), 4);
  EXPECT_EQ(*s->prediction.value, Prediction::EPS);
}

// An SD2 768-v config as A1111 ships it: v-prediction and num_head_channels 64 (num_heads -1).
TEST_F(ModelConfigTest, SD2VConfigMakesTheCheckpointV) {
  std::string ckpt = checkpoint("sd2-768-v.safetensors", {});
  write("sd2-768-v.yaml", R"(model:
  base_learning_rate: 1.0e-4
  target: ldm.models.diffusion.ddpm.LatentDiffusion
  params:
    parameterization: "v"
    unet_config:
      target: ldm.modules.diffusionmodules.openaimodel.UNetModel
      params:
        num_head_channels: 64 # need to fix for flash-attn
        num_heads: -1
        use_linear_in_transformer: True
)");
  auto f = SafetensorsFile::open(ckpt);
  ASSERT_TRUE(f.ok()) << f.status().str();
  auto info = checkpoint_inspect(**f);
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->prediction, Prediction::V);
  EXPECT_NE(info->prediction_source.find("sd2-768-v.yaml"), std::string::npos);
  EXPECT_EQ(*info->settings.unet_num_head_channels.value, 64);
  EXPECT_FALSE(info->settings.unet_num_heads.value);
  // The caller's override still wins.
  auto over = checkpoint_inspect(**f, Prediction::EPS);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->prediction, Prediction::EPS);
  EXPECT_EQ(over->prediction_source, "override");
}

TEST_F(ModelConfigTest, SGMVScaling) {
  std::string p = write("x.yaml", R"(model:
  params:
    denoiser_config:
      params:
        scaling_config:
          target: sgm.modules.diffusionmodules.denoiser_scaling.VScaling
)");
  auto s = model_config_read(p);
  ASSERT_TRUE(s.ok()) << s.status().str();
  EXPECT_EQ(*s->prediction.value, Prediction::V);
}

// Config file, then metadata, then detection; each field from the highest place that sets it.
TEST_F(ModelConfigTest, ConfigThenMetadataThenDetection) {
  std::map<std::string, std::string> meta = {{"headroom.unet.num_heads", "4"},
                                             {"headroom.clip.heads", "2,6"},
                                             {"modelspec.prediction_type", "v"}};
  std::string with_yaml = checkpoint("a.safetensors", meta);
  write("a.yaml", "model:\n  params:\n    parameterization: eps\n");
  auto s = model_settings_read(with_yaml, meta);
  ASSERT_TRUE(s.ok()) << s.status().str();
  EXPECT_EQ(*s->prediction.value, Prediction::EPS);  // the config file wins
  EXPECT_NE(s->prediction.source.find("a.yaml"), std::string::npos);
  EXPECT_EQ(*s->unet_num_heads.value, 4);  // not in the config: metadata
  EXPECT_EQ(s->unet_num_heads.source, "metadata headroom.unet.num_heads");
  EXPECT_EQ(s->text_encoder_heads_at(1), 6);

  std::string bare = checkpoint("b.safetensors", meta);
  auto m = model_settings_read(bare, meta);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m->prediction.value, Prediction::V);
  EXPECT_EQ(m->prediction.source, "metadata modelspec.prediction_type");
  EXPECT_TRUE(m->config_path.empty());

  std::string none = checkpoint("c.safetensors", {});
  auto f = SafetensorsFile::open(none);
  ASSERT_TRUE(f.ok());
  auto info = checkpoint_inspect(**f);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->prediction, Prediction::EPS);
  EXPECT_EQ(info->prediction_source, "default");
  EXPECT_FALSE(info->settings.unet_num_heads.value);
}

TEST_F(ModelConfigTest, BadFilesNameTheProblem) {
  std::string broken = write("broken.yaml", "model:\n  params: [unclosed\n");
  auto a = model_config_read(broken);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::CORRUPT);
  EXPECT_NE(a.status().message().find("broken.yaml"), std::string::npos);

  std::string wrong = write("wrong.yaml", "model:\n  params:\n    unet_config:\n      params:\n"
                                          "        num_heads: eight\n");
  auto b = model_config_read(wrong);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("model.params.unet_config.params.num_heads"),
            std::string::npos);

  std::string pred = write("pred.yaml", "model:\n  params:\n    parameterization: x0\n");
  EXPECT_FALSE(model_config_read(pred).ok());
  std::string heads = write("heads.yaml", "headroom:\n  text_encoder_heads: 4\n");
  auto c = model_config_read(heads);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("text_encoder_heads"), std::string::npos);

  // A checkpoint whose config is bad fails to inspect, naming the config.
  std::string ckpt = checkpoint("bad.safetensors", {});
  write("bad.yaml", "- just\n- a list\n");
  auto f = SafetensorsFile::open(ckpt);
  ASSERT_TRUE(f.ok());
  auto info = checkpoint_inspect(**f);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("bad.yaml"), std::string::npos);

  auto meta = model_settings_from_metadata({{"headroom.unet.num_heads", "x"}});
  EXPECT_FALSE(meta.ok());
}

// A Flux DiT's RoPE axes (Note [flux rope axes]): from the YAML's headroom.flux.axes_dim, else
// the metadata's; a malformed value names its key.
TEST_F(ModelConfigTest, FluxAxesFromConfigThenMetadata) {
  std::map<std::string, std::string> meta = {{"headroom.flux.axes_dim", " 4, 6,6"}};
  auto m = model_settings_from_metadata(meta);
  ASSERT_TRUE(m.ok()) << m.status().str();
  EXPECT_EQ(*m->flux_axes_dim.value, (std::vector<int>{4, 6, 6}));
  EXPECT_EQ(m->flux_axes_dim.source, "metadata headroom.flux.axes_dim");

  std::string with_yaml = checkpoint("f.safetensors", meta);
  write("f.yaml", "headroom:\n  flux:\n    axes_dim: [2, 2, 4]\n");
  auto s = model_settings_read(with_yaml, meta);
  ASSERT_TRUE(s.ok()) << s.status().str();
  EXPECT_EQ(*s->flux_axes_dim.value, (std::vector<int>{2, 2, 4}));
  EXPECT_NE(s->flux_axes_dim.source.find("f.yaml (headroom.flux.axes_dim)"), std::string::npos);

  auto bad_meta = model_settings_from_metadata({{"headroom.flux.axes_dim", "16;56;56"}});
  ASSERT_FALSE(bad_meta.ok());
  EXPECT_NE(bad_meta.status().message().find("headroom.flux.axes_dim"), std::string::npos);
  auto bad_yaml = model_config_read(write("g.yaml", "headroom:\n  flux:\n    axes_dim: 16\n"));
  ASSERT_FALSE(bad_yaml.ok());
  EXPECT_NE(bad_yaml.status().message().find("g.yaml"), std::string::npos);
  EXPECT_NE(bad_yaml.status().message().find("headroom.flux.axes_dim"), std::string::npos);
}

// The tiny checkpoints load with the heads their configs state (the weights cannot show them).
TEST_F(ModelConfigTest, TinyCheckpointsLoadWithConfigHeads) {
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  EXPECT_EQ(sd_unet(**m)->config.num_heads, 8);
  EXPECT_EQ((*m)->info.settings.text_encoder_heads_at(0), 4);
  EXPECT_NE((*m)->info.settings.config_path.find("tiny-sd1.yaml"), std::string::npos);
  auto x = model_load(test::golden_path("tiny-sdxl.safetensors"));
  ASSERT_TRUE(x.ok()) << x.status().str();
  EXPECT_EQ(sd_unet(**x)->config.num_head_channels, 32);
}

}  // namespace
}  // namespace hr
