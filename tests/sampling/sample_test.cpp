// The KSampler flow and CFG against the golden sampling runs, as far as they go without the
// UNet: initial noise, x_init, sigmas, and the first sampler step from the stored denoised value.
#include "sampling/sample.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "golden_sampling.h"
#include "sampling/cfg.h"
#include "sampling/schedulers.h"

namespace hr {
namespace {

const char* kSamplers[] = {"euler", "euler_ancestral", "dpmpp_2m"};
const char* kSchedulers[] = {"normal", "karras"};

TEST(Sample, InitialNoiseAndXInitMatchGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  auto ref_noise = g->load("sampler.noise", DType::F32);
  ASSERT_TRUE(ref_noise.ok());
  HostTensor noise = prepare_noise(Shape{1, 4, 8, 8}, 42);
  EXPECT_LE(test::float_diff(noise.f32(), ref_noise->f32(), noise.numel()).max_abs, 1e-6);
  for (const char* s : kSamplers) {
    for (const char* sched : kSchedulers) {
      const std::string pre = std::string("sampler.") + s + "." + sched + ".";
      auto sig = ksampler_sigmas(ms, sched, s, 6);
      ASSERT_TRUE(sig.ok());
      EXPECT_TRUE(ms.is_max_denoise((*sig)[0]));
      auto ref = g->load(pre + "x_init", DType::F32);
      ASSERT_TRUE(ref.ok());
      // From the golden noise itself: the scaling alone must agree to float rounding.
      HostTensor x =
          sample_initial_x(ms, *ref_noise, HostTensor(DType::F32, Shape{1, 4, 8, 8}), (*sig)[0]);
      auto d = test::float_diff(x.f32(), ref->f32(), x.numel());
      std::printf("  %-40s exact %.3f max_abs %.3g\n", (pre + "x_init").c_str(), d.exact_fraction(),
                  d.max_abs);
      EXPECT_LE(d.max_ulp, 1) << pre;
    }
  }
}

// The first update needs only x_init, the stored denoised value and (euler_ancestral) draw 0
// of the ancestral generator, so it is checked against x_after_step1 without a model.
TEST(Sample, FirstStepMatchesGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  auto noise = g->load("sampler.noise", DType::F32);
  ASSERT_TRUE(noise.ok());
  for (const char* s : kSamplers) {
    for (const char* sched : kSchedulers) {
      const std::string pre = std::string("sampler.") + s + "." + sched + ".";
      auto den0 = g->load(pre + "denoised_step0", DType::F32);
      auto x1 = g->load(pre + "x_after_step1", DType::F32);
      auto sig = ksampler_sigmas(ms, sched, s, 6);
      ASSERT_TRUE(den0.ok() && x1.ok() && sig.ok());
      DenoiseFn stored = [&](const HostTensor&, float) -> Result<HostTensor> {
        return den0->clone();
      };
      SampleParams p;
      p.sampler = s;
      p.sigmas = {(*sig)[0], (*sig)[1]};
      p.seed = 42;
      auto out = sample(ms, stored, *noise, HostTensor(), p);
      ASSERT_TRUE(out.ok()) << out.status().str();
      auto d = test::float_diff(out->f32(), x1->f32(), out->numel());
      std::printf("  %-46s exact %.3f max_abs %.3g (relative %.3g)\n",
                  (pre + "x_after_step1").c_str(), d.exact_fraction(), d.max_abs, d.max_rel);
      EXPECT_LE(d.max_rel, 2e-6) << pre;
    }
  }
}

TEST(Sample, EmptySigmasReturnTheLatent) {
  ModelSamplingDiscrete ms;
  HostTensor noise(DType::F32, Shape{1, 4, 2, 2}), latent(DType::F32, Shape{1, 4, 2, 2});
  latent.f32()[3] = 7.0f;
  SampleParams p;
  DenoiseFn never = [](const HostTensor& x, float) -> Result<HostTensor> { return x.clone(); };
  auto out = sample(ms, never, noise, latent, p);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->f32()[3], 7.0f);
  p.sigmas = {1.0f, 0.0f};
  p.sampler = "nope";
  EXPECT_EQ(sample(ms, never, noise, latent, p).status().code(), ErrorCode::UNSUPPORTED);
}

TEST(Cfg, CombineAndDenoiser) {
  HostTensor c(DType::F32, Shape{1, 1, 1, 2}), u(DType::F32, Shape{1, 1, 1, 2});
  c.f32()[0] = 3.0f;
  c.f32()[1] = -1.0f;
  u.f32()[0] = 1.0f;
  u.f32()[1] = 1.0f;
  HostTensor r = cfg_combine(c, u, 7.5f);
  EXPECT_FLOAT_EQ(r.f32()[0], 1.0f + 2.0f * 7.5f);
  EXPECT_FLOAT_EQ(r.f32()[1], 1.0f - 2.0f * 7.5f);

  // An EPS "model" that predicts a constant: eps_c = 0.5, eps_u = 0.1.
  ModelSamplingDiscrete ms;
  float seen_t = -1;
  int uncond_calls = 0;
  ModelFn cond = [&](const HostTensor& x_in, float t) -> Result<HostTensor> {
    seen_t = t;
    HostTensor o(x_in.desc());
    for (int64_t i = 0; i < o.numel(); ++i) o.f32()[i] = 0.5f;
    return o;
  };
  ModelFn uncond = [&](const HostTensor& x_in, float) -> Result<HostTensor> {
    ++uncond_calls;
    HostTensor o(x_in.desc());
    for (int64_t i = 0; i < o.numel(); ++i) o.f32()[i] = 0.1f;
    return o;
  };
  HostTensor x(DType::F32, Shape{1, 1, 1, 2});
  x.f32()[0] = 2.0f;
  const float sigma = ms.sigma_max();
  auto den = cfg_denoiser(ms, cond, uncond, 7.5f)(x, sigma);
  ASSERT_TRUE(den.ok());
  EXPECT_EQ(seen_t, 999.0f);
  // den = x - sigma * (eps_u + (eps_c - eps_u) * 7.5)
  EXPECT_NEAR(den->f32()[0], 2.0f - sigma * (0.1f + 0.4f * 7.5f), 1e-4);
  auto one = cfg_denoiser(ms, cond, uncond, 1.0f)(x, sigma);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(uncond_calls, 1);  // cfg 1 skips the negative pass
  EXPECT_NEAR(one->f32()[0], 2.0f - sigma * 0.5f, 1e-5);

  // The batched form sees [x_in; x_in] and splits the output the same way.
  ModelFn both = [&](const HostTensor& x_in, float) -> Result<HostTensor> {
    EXPECT_EQ(x_in.shape()[0], 2);
    HostTensor o(x_in.desc());
    const int64_t half = o.numel() / 2;
    for (int64_t i = 0; i < o.numel(); ++i) o.f32()[i] = i < half ? 0.5f : 0.1f;
    return o;
  };
  auto den_b = cfg_denoiser_batched(ms, both, 7.5f)(x, sigma);
  ASSERT_TRUE(den_b.ok());
  EXPECT_EQ(den_b->f32()[0], den->f32()[0]);
  EXPECT_EQ(den_b->f32()[1], den->f32()[1]);
}

}  // namespace
}  // namespace hr
