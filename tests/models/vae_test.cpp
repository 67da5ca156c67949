// VAE tests: configuration detection, decode and encode against the golden tensors (f32, CPU
// backend) for the tiny SD1 and SDXL VAEs, and planning a full-size decode.
#include "models/sd/vae.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "graph/planner.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/weight_load.h"
#include "memory/weight_set.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

// See Note [golden tolerance] in unet_test.cpp: README "Tolerances" puts float32 rounding of
// these passes at ~1e-6 of max |x|; 1e-4 relative L2 leaves two orders of margin.
constexpr double kRelTol = 1e-4;

class VAETest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    gold_ = std::move(g).value();
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }

  // Loads the VAE of a tiny checkpoint into w and returns its detected configuration.
  VAEConfig load(const std::string& file, WeightSet& w) {
    auto f = SafetensorsFile::open(test::golden_path(file));
    EXPECT_TRUE(f.ok()) << f.status().str();
    if (!f.ok()) return {};
    auto cfg = vae_config_detect(**f, "first_stage_model.");
    EXPECT_TRUE(cfg.ok()) << cfg.status().str();
    EXPECT_TRUE(weights_load_prefix(w, **f, "first_stage_model.", DType::F32).ok());
    return cfg.ok() ? *cfg : VAEConfig{};
  }

  HostTensor golden(const std::string& name) {
    auto t = gold_->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  std::unique_ptr<SafetensorsFile> gold_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(VAETest, DetectsTinyConfig) {
  for (const char* file : {"tiny-sd1.safetensors", "tiny-sdxl.safetensors"}) {
    WeightSet w;
    VAEConfig c = load(file, w);
    VAEConfig want;
    want.ch = 32;
    want.ch_mult = {1, 2, 2, 2};
    want.num_res_blocks = 2;
    want.z_channels = 4;
    want.embed_dim = 4;
    want.use_quant_conv = true;
    EXPECT_EQ(c, want) << file << ": " << c.str();
    EXPECT_EQ(c.downscale(), 8);

    // Decoder and encoder graphs together declare exactly the file's VAE tensors.
    auto dec = vae_decode_graph(c, 1, 8, 8, DType::F32);
    auto enc = vae_encode_graph(c, 1, 64, 64, DType::F32);
    ASSERT_TRUE(dec.ok()) << dec.status().str();
    ASSERT_TRUE(enc.ok()) << enc.status().str();
    std::set<std::string> names;
    for (const Graph* g : {&*dec, &*enc})
      for (const Value& v : g->values())
        if (v.kind == ValueKind::WEIGHT) {
          names.insert(v.name);
          const HostTensor* t = w.find(v.name);
          ASSERT_NE(t, nullptr) << v.name;
          EXPECT_EQ(t->shape(), v.desc.shape) << v.name;
        }
    EXPECT_EQ(names.size(), w.size());
  }
}

struct VAECase {
  const char* file;
  const char* golden;  // "vae.sd1" / "vae.sdxl"
};

class VAEGoldenTest : public VAETest, public ::testing::WithParamInterface<VAECase> {};

TEST_P(VAEGoldenTest, Decode) {
  WeightSet w;
  VAEConfig c = load(GetParam().file, w);
  std::string pre = GetParam().golden;
  // As built (NCHW) and through the channels-last pass that GPUs get (graph/passes.h).
  for (bool cl : {false, true}) {
    ex_->set_pass_options(cl ? std::optional<PassOptions>(PassOptions{true, true}) : std::nullopt);
    for (const char* which : {".decode", ".decode_nonsquare"}) {
      HostTensor z = golden(pre + which + ".latent");
      HostTensor ref = golden(pre + which + ".image");
      auto img = vae_decode(*ex_, c, w, DType::F32, z);
      ASSERT_TRUE(img.ok()) << img.status().str();
      double err = test::rel_err(*img, ref);
      std::printf("%s%s.image%s rel error %.3g\n", pre.c_str(), which, cl ? " (channels last)" : "", err);
      EXPECT_LT(err, kRelTol);
    }
  }
}

TEST_P(VAEGoldenTest, Encode) {
  WeightSet w;
  VAEConfig c = load(GetParam().file, w);
  std::string pre = GetParam().golden;
  HostTensor img = golden(pre + ".encode.image");
  for (bool cl : {false, true}) {
    ex_->set_pass_options(cl ? std::optional<PassOptions>(PassOptions{true, true}) : std::nullopt);
    auto m = vae_encode(*ex_, c, w, DType::F32, img);
    ASSERT_TRUE(m.ok()) << m.status().str();
    double em = test::rel_err(m->mean, golden(pre + ".encode.mean"));
    double el = test::rel_err(m->logvar, golden(pre + ".encode.logvar"));
    std::printf("%s.encode%s.mean rel error %.3g, logvar %.3g\n", pre.c_str(),
                cl ? " (channels last)" : "", em, el);
    EXPECT_LT(em, kRelTol);
    EXPECT_LT(el, kRelTol);
  }
}

INSTANTIATE_TEST_SUITE_P(VAE, VAEGoldenTest,
                         ::testing::Values(VAECase{"tiny-sd1.safetensors", "vae.sd1"},
                                           VAECase{"tiny-sdxl.safetensors", "vae.sdxl"}),
                         [](const auto& info) {
                           return std::string(info.param.golden).substr(4);
                         });

// The full-size SD VAE decoding a 64x64 latent (512x512 image) builds and plans.
TEST_F(VAETest, FullSizeDecodePlans) {
  auto g = vae_decode_graph(vae_config_sd(), 1, 64, 64, DType::F16);
  ASSERT_TRUE(g.ok()) << g.status().str();
  auto plan = ex_->plan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  std::printf("SD VAE decode f16 64x64 -> 512x512: arena %s, weights %s\n",
              bytes_format((*plan)->arena_bytes).c_str(), bytes_format(g->weight_bytes()).c_str());
  EXPECT_EQ(g->shape(g->outputs()[0]), (Shape{1, 3, 512, 512}));
}

}  // namespace
}  // namespace hr
