// UNETLoader on a BFL Flux.1 file written by make-model (tiny) and KSampler on the DiT it loads:
// the family's model sampling and the cfg-1 rule (ComfyUI skips the unconditional call, so the
// negative cannot change the result).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "models/flux/flux_make_model.h"
#include "models/flux/flux_model.h"
#include "node_harness.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// A conditioning of one entry: `tokens` T5 rows and a CLIP pooled vector, made from `salt`.
std::shared_ptr<const Conditioning> flux_cond(const FluxConfig& c, int64_t tokens, float salt) {
  auto ctx = std::make_shared<HostTensor>(DType::F32, Shape{1, tokens, c.context_in_dim});
  auto pooled = std::make_shared<HostTensor>(DType::F32, Shape{1, c.vec_in_dim});
  for (int64_t i = 0; i < ctx->numel(); ++i) ctx->f32()[i] = std::sin(salt * float(i + 1));
  for (int64_t i = 0; i < pooled->numel(); ++i) pooled->f32()[i] = std::cos(salt * float(i + 3));
  Conditioning out;
  CondEntry e;
  e.cond = ctx;
  e.extras.set(kCondPooledOutput, std::shared_ptr<const HostTensor>(pooled));
  out.entries.push_back(std::move(e));
  return std::make_shared<const Conditioning>(std::move(out));
}

class FluxLoader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hr_flux_loader_test_" + std::to_string(getpid()));
    MakeModelSpec spec;
    spec.arch = "flux";
    spec.seed = 3;
    Result<std::vector<FluxMadeFile>> made =
        flux_make_model_write(spec, (dir_ / "models").string());
    ASSERT_TRUE(made.ok()) << made.status().str();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    rt_.wire(opts_);
    opts_.models_dir = (dir_ / "models").string();
  }

  // One node run as PromptExecutor runs it after validation.
  Result<std::vector<std::any>> run(const std::string& class_type, const NodeInputs& in) {
    const NodeDef* def = registry_.find(class_type);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", class_type);
    ExecContext ctx{opts_, prompt_, "1"};
    return def->run(ctx, in);
  }

  Result<std::shared_ptr<const ModelValue>> unet(const std::string& name) {
    NodeInputs in;
    in.literals["unet_name"] = name;
    in.literals["weight_dtype"] = "default";
    HR_ASSIGN_OR_RETURN(std::vector<std::any> out, run("UNETLoader", in));
    return std::any_cast<std::shared_ptr<const ModelValue>>(out.at(0));
  }

  HostTensor ksampler(const std::shared_ptr<const ModelValue>& m, double cfg,
                      std::shared_ptr<const Conditioning> pos,
                      std::shared_ptr<const Conditioning> neg) {
    NodeInputs in;
    Json lit = {{"seed", 5},
                {"steps", 2},
                {"cfg", cfg},
                {"denoise", 1.0},
                {"sampler_name", "euler"},
                {"scheduler", "simple"}};
    for (auto& [k, v] : lit.items()) in.literals[k] = v;
    in.links["model"] = m;
    in.links["positive"] = pos;
    in.links["negative"] = neg;
    in.links["latent_image"] = test::latent_value(HostTensor(DType::F32, Shape{1, 16, 6, 8}));
    auto l = test::output_as<Latent>(run("KSampler", in));
    return l ? l->samples->clone() : HostTensor();
  }

  static fs::path dir_;
  test::CpuRuntime rt_;
  ExecOptions opts_;
  NodeRegistry registry_;
  Prompt prompt_;
};
fs::path FluxLoader::dir_;

TEST_F(FluxLoader, UnetLoaderLoadsTheBflDiT) {
  Result<std::shared_ptr<const ModelValue>> m = unet("flux1-dev.safetensors");
  ASSERT_TRUE(m.ok()) << m.status().str();
  LoadedModel& model = *(*m)->model;
  EXPECT_EQ(model.info.family_name(), "flux");
  EXPECT_EQ(model.vae, nullptr);
  ASSERT_NE(flux_model(model), nullptr);
  EXPECT_EQ((*m)->sampling_spec().kind, ModelSamplingSpec::Kind::FLUX);
  EXPECT_TRUE(flux_model(model)->config.guidance_embed);
}

TEST_F(FluxLoader, UnetLoaderSaysWhenAFileHoldsNoDiffusionModel) {
  // make-model's vae/ae.safetensors, put where UNETLoader looks.
  fs::copy_file(dir_ / "models/vae/ae.safetensors", dir_ / "models/diffusion_models/ae.safetensors",
                fs::copy_options::overwrite_existing);
  Result<std::shared_ptr<const ModelValue>> m = unet("ae.safetensors");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("holds no diffusion model"), std::string::npos)
      << m.status().str();
}

TEST_F(FluxLoader, KSamplerRunsTheDiTAndCfgOneIgnoresTheNegative) {
  Result<std::shared_ptr<const ModelValue>> m = unet("flux1-dev.safetensors");
  ASSERT_TRUE(m.ok()) << m.status().str();
  const FluxConfig& c = flux_model(*(*m)->model)->config;
  auto pos = flux_cond(c, 4, 0.3f), neg_a = flux_cond(c, 4, 0.7f), neg_b = flux_cond(c, 6, 1.1f);
  HostTensor a = ksampler(*m, 1.0, pos, neg_a);
  HostTensor b = ksampler(*m, 1.0, pos, neg_b);
  ASSERT_EQ(a.shape(), (Shape{1, 16, 6, 8}));
  ASSERT_EQ(b.shape(), a.shape());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_TRUE(std::isfinite(a.f32()[i]));
  // cfg 3 calls the negative too: positive and negative of other lengths run apart
  // (Note [flux entries]), and the result now depends on the negative.
  HostTensor c3 = ksampler(*m, 3.0, pos, neg_b);
  ASSERT_EQ(c3.shape(), a.shape());
  for (int64_t i = 0; i < c3.numel(); ++i) ASSERT_TRUE(std::isfinite(c3.f32()[i]));
  EXPECT_NE(std::memcmp(c3.data(), a.data(), a.bytes()), 0);
}

}  // namespace
}  // namespace hr
