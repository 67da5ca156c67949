// The Flux.1 autoencoder through ComfyUI's nodes: VAELoader on a bare ae.safetensors in
// models/vae, then VAEDecode and VAEEncode against what ComfyUI's own nodes return
// (tests/data/flux/vae_golden.safetensors: VAE.decode's clamped NHWC image, VAE.encode's
// cropped mean), and VAEDecode refusing an SD latent.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "node_harness.h"
#include "test_compare.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// Note [vae tolerance] (nodes_image_test.cpp): torch and the CPU backend differ by float32
// rounding only.
constexpr double kVAETol = 1e-4;

HostTensor golden(const std::string& name) {
  auto f = SafetensorsFile::open(test::data_path("flux/vae_golden.safetensors"));
  EXPECT_TRUE(f.ok()) << f.status().str();
  if (!f.ok()) return {};
  auto t = (*f)->load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

class FluxVAENodes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr-flux-vae-nodes-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_ / "vae");
    fs::copy_file(test::data_path("flux/tiny_flux_ae.safetensors"), dir_ / "vae" / "ae.safetensors");
    rt_.wire(opts_);
    opts_.models_dir = dir_.string();
    NodeEnv env;  // VAELoader's vae_name offers the files of this models/vae
    env.models_dir = dir_.string();
    nodes_register(registry_, env);
    NodeInputs in;
    in.literals["vae_name"] = "ae.safetensors";
    vae_ = test::output_as<VAEValue>(run("VAELoader", in));
    ASSERT_TRUE(vae_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  Result<std::vector<std::any>> run(const std::string& cls, const NodeInputs& in) {
    const NodeDef* def = registry_.find(cls);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", cls);
    if (const InputSpec* spec = def->input("vae_name")) {  // the combo check of validation
      auto opts = spec->combo_options();
      EXPECT_NE(std::find(opts.begin(), opts.end(), "ae.safetensors"), opts.end());
    }
    ExecContext ctx{opts_, prompt_, "1"};
    return def->run(ctx, in);
  }

  fs::path dir_;
  test::CpuRuntime rt_;
  ExecOptions opts_;
  NodeRegistry registry_;
  Prompt prompt_;
  std::shared_ptr<const VAEValue> vae_;
};

TEST_F(FluxVAENodes, DecodeMatchesComfyUIsVAEDecode) {
  NodeInputs in;
  in.links["samples"] = test::latent_value(golden("decode.latent"));
  in.links["vae"] = vae_;
  auto img = test::output_as<ImageValue>(run("VAEDecode", in));
  ASSERT_TRUE(img);
  HostTensor want = golden("decode.image");  // [B, H, W, 3] in [0, 1]
  ASSERT_EQ(img->pixels->shape(), want.shape());
  const double rel = test::rel_err(*img->pixels, want);
  std::printf("  VAEDecode vs ComfyUI: rel L2 %.3g, max |d| %.3g\n", rel,
              double(test::max_abs_diff(*img->pixels, want)));
  EXPECT_LE(rel, kVAETol);
}

// VAEEncode crops 18 x 22 pixels to 16 x 20 (multiples of the tiny VAE's downscale ratio 4,
// centred) as ComfyUI's vae_encode_crop_pixels does.
TEST_F(FluxVAENodes, EncodeMatchesComfyUIsVAEEncode) {
  NodeInputs in;
  in.links["pixels"] = test::image_value(golden("encode.pixels"));
  in.links["vae"] = vae_;
  auto lat = test::output_as<Latent>(run("VAEEncode", in));
  ASSERT_TRUE(lat);
  HostTensor want = golden("encode.latent");
  ASSERT_EQ(lat->samples->shape(), want.shape());
  const double rel = test::rel_err(*lat->samples, want);
  std::printf("  VAEEncode vs ComfyUI: rel L2 %.3g\n", rel);
  EXPECT_LE(rel, kVAETol);
}

TEST_F(FluxVAENodes, DecodeRefusesAnSDLatent) {
  NodeInputs in;
  in.links["samples"] = test::latent_value(HostTensor(DType::F32, Shape{1, 4, 8, 8}));
  in.links["vae"] = vae_;
  auto r = run("VAEDecode", in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the latent has 4 channels but this VAE takes 16-channel "
                                      "latents"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("ae.safetensors"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace hr
