// Sampler trajectories on the tiny SD1 checkpoint against ComfyUI's (golden sampler.* tensors):
// seed 42, 6 steps, cfg 7.5, euler / euler_ancestral / dpmpp_2m x normal / karras.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "sampling/cfg.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/schedulers.h"
#include "sampling/torch_rng.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

using test::rel_err;

struct Fixture {
  std::unique_ptr<Backend> backend = cpu_backend_create(0);
  Allocator alloc{*backend, Allocator::kUnlimited, eviction_policy()};
  Executor ex{*backend, alloc, executor_policies_default(*backend)};
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<SafetensorsFile> golden;
};

Fixture& fixture() {
  static Fixture f;
  if (!f.model) {
    LoadOptions o;
    o.load_vae = false;
    auto m = model_load(test::golden_path("tiny-sd1.safetensors"), o);
    EXPECT_TRUE(m.ok()) << m.status().str();
    if (m.ok()) f.model = std::move(m).value();
    auto g = SafetensorsFile::open(test::golden_path("golden-sampling.safetensors"));
    EXPECT_TRUE(g.ok()) << g.status().str();
    if (g.ok()) f.golden = std::move(g).value();
  }
  return f;
}

HostTensor golden(const std::string& name) {
  auto t = fixture().golden->load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

class Trajectory : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(Trajectory, MatchesComfyUI) {
  auto [sampler, scheduler] = GetParam();
  Fixture& f = fixture();
  ASSERT_TRUE(f.model && f.golden);
  std::string key = std::string("sampler.") + sampler + "." + scheduler + ".";
  ModelSamplingDiscrete ms(SamplingPrediction::EPS);
  auto sig = calculate_sigmas(ms, scheduler, 6);
  ASSERT_TRUE(sig.ok());
  HostTensor gs = golden(key + "sigmas");
  ASSERT_EQ(int64_t(sig->size()), gs.numel());
  for (size_t i = 0; i < sig->size(); ++i) EXPECT_NEAR((*sig)[i], gs.f32()[i], 1e-6 * std::max(1.0f, gs.f32()[i]));

  HostTensor pos = golden("sampler.cond_positive"), neg = golden("sampler.cond_negative");
  HostTensor ctx(DType::F32, Shape{2, pos.shape()[1], pos.shape()[2]});
  std::copy_n(pos.f32(), pos.numel(), ctx.f32());
  std::copy_n(neg.f32(), neg.numel(), ctx.f32() + pos.numel());
  HostTensor ctx1 = pos.clone();
  DenoiseFn denoise = cfg_denoiser_batched(
      ms,
      [&](const HostTensor& x_in, float t) -> Result<HostTensor> {
        HostTensor ts(DType::F32, Shape{x_in.shape()[0]});
        for (int64_t i = 0; i < ts.numel(); ++i) ts.f32()[i] = t;
        return unet_run(f.ex, *sd_unet(*f.model), x_in, ts, x_in.shape()[0] == 2 ? ctx : ctx1);
      },
      7.5f);
  Shape shape{1, 4, 8, 8};
  HostTensor noise = prepare_noise(shape, 42);
  HostTensor latent(DType::F32, shape);
  HostTensor denoised0, x_step1;
  SampleParams p;
  p.sampler = sampler;
  p.sigmas = *sig;
  p.seed = 42;
  p.callback = [&](int step, int, const HostTensor& x, const HostTensor& den) {
    if (step == 0) denoised0 = den.clone();
    if (step == 1) x_step1 = x.clone();
  };
  auto out = sample(ms, denoise, noise, latent, p);
  ASSERT_TRUE(out.ok()) << out.status().str();
  // Tolerance: f16 weights upcast exactly, f32 math in another summation order; the UNet alone
  // matches to ~1.5e-6, and six sampler steps amplify that by at most a few times.
  EXPECT_LT(rel_err(sample_initial_x(ms, noise, latent, (*sig)[0]), golden(key + "x_init")), 1e-5);
  EXPECT_LT(rel_err(denoised0, golden(key + "denoised_step0")), 1e-4);
  EXPECT_LT(rel_err(x_step1, golden(key + "x_after_step1")), 1e-4);
  EXPECT_LT(rel_err(*out, golden(key + "final")), 1e-4);
  HostTensor comfy = out->clone();
  for (int64_t i = 0; i < comfy.numel(); ++i) comfy.f32()[i] /= 0.18215f;
  EXPECT_LT(rel_err(comfy, golden(key + "final_comfy_latent")), 1e-4);
  std::printf("%s/%s final rel err %.3g\n", sampler, scheduler, rel_err(*out, golden(key + "final")));
}

INSTANTIATE_TEST_SUITE_P(Golden, Trajectory,
                         ::testing::Combine(::testing::Values("euler", "euler_ancestral", "dpmpp_2m"),
                                            ::testing::Values("normal", "karras")));

}  // namespace
}  // namespace hr
