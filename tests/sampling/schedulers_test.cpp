// Model sampling tables, sigma <-> timestep and every scheduler against the golden sigmas.
#include "sampling/schedulers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "golden_sampling.h"
#include "sampling/model_sampling.h"

namespace hr {
namespace {

void expect_sigmas_near(const std::vector<float>& got, const HostTensor& ref,
                        const std::string& what, double rel = 1e-6) {
  ASSERT_EQ(int64_t(got.size()), ref.numel()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = ref.f32()[i];
    const double err = std::fabs(double(got[i]) - r) / std::max(std::fabs(r), 1e-6);
    worst = std::max(worst, err);
    EXPECT_LE(err, rel) << what << " [" << i << "]: " << got[i] << " vs " << r;
  }
  std::printf("  %-46s n=%-3zu max rel err %.3g\n", what.c_str(), got.size(), worst);
}

TEST(ModelSampling, TablesMatchGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  auto sig = g->load("model_sampling.sigmas", DType::F32);
  auto lsig = g->load("model_sampling.log_sigmas", DType::F32);
  ASSERT_TRUE(sig.ok() && lsig.ok());
  auto d1 = test::float_diff(ms.sigmas().data(), sig->f32(), 1000);
  auto d2 = test::float_diff(ms.log_sigmas().data(), lsig->f32(), 1000);
  std::printf("  sigmas exact %.4f max_ulp %lld; log_sigmas exact %.4f max_ulp %lld\n",
              d1.exact_fraction(), (long long)d1.max_ulp, d2.exact_fraction(),
              (long long)d2.max_ulp);
  EXPECT_LE(d1.max_ulp, 1);
  EXPECT_LE(d2.max_ulp, 1);
}

TEST(ModelSampling, SigmaTimestepMatchGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  auto qs = g->load("model_sampling.sigma_to_timestep.sigma", DType::F32);
  auto ts = g->load("model_sampling.sigma_to_timestep.timestep", DType::F32);
  ASSERT_TRUE(qs.ok() && ts.ok());
  for (int64_t i = 0; i < qs->numel(); ++i) {
    EXPECT_EQ(ms.timestep(qs->f32()[i]), ts->f32()[i]) << "sigma " << qs->f32()[i];
  }
  auto qt = g->load("model_sampling.timestep_to_sigma.timestep", DType::F32);
  auto st = g->load("model_sampling.timestep_to_sigma.sigma", DType::F32);
  ASSERT_TRUE(qt.ok() && st.ok());
  for (int64_t i = 0; i < qt->numel(); ++i) {
    const float got = ms.sigma(qt->f32()[i]), ref = st->f32()[i];
    EXPECT_NEAR(got, ref, 1e-6 * ref) << "t " << qt->f32()[i];
  }
}

TEST(ModelSampling, RoundTrips) {
  ModelSamplingDiscrete ms;
  for (int t = 0; t < 1000; ++t) {
    EXPECT_EQ(ms.timestep(ms.sigma(float(t))), float(t));
    EXPECT_NEAR(ms.sigma(float(t)), ms.sigmas()[size_t(t)], 1e-6 * ms.sigmas()[size_t(t)]) << t;
  }
  EXPECT_EQ(ms.timestep(100.0f), 999.0f);  // clamps beyond the table
  EXPECT_EQ(ms.timestep(1e-4f), 0.0f);
  EXPECT_TRUE(ms.is_max_denoise(ms.sigma_max()));
  EXPECT_TRUE(ms.is_max_denoise(ms.sigma_max() * 1.000005f));
  EXPECT_FALSE(ms.is_max_denoise(ms.sigma_max() * 0.999f));
}

TEST(ModelSampling, InputDenoisedAndNoiseScaling) {
  ModelSamplingDiscrete eps(SamplingPrediction::EPS), v(SamplingPrediction::V_PREDICTION);
  HostTensor x(DType::F32, Shape{4}), m(DType::F32, Shape{4});
  for (int i = 0; i < 4; ++i) {
    x.f32()[i] = 1.0f + float(i);
    m.f32()[i] = 0.5f - float(i);
  }
  const float s = 3.0f;
  HostTensor in = eps.calculate_input(x, s);
  HostTensor de = eps.calculate_denoised(s, m, x);
  HostTensor dv = v.calculate_denoised(s, m, x);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(in.f32()[i], x.f32()[i] / std::sqrt(10.0f));
    EXPECT_FLOAT_EQ(de.f32()[i], x.f32()[i] - m.f32()[i] * s);
    EXPECT_FLOAT_EQ(dv.f32()[i], x.f32()[i] / 10.0f - m.f32()[i] * 3.0f / std::sqrt(10.0f));
  }
  HostTensor n1 = eps.noise_scaling(s, x, m, true), n2 = eps.noise_scaling(s, x, m, false);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(n1.f32()[i], x.f32()[i] * std::sqrt(10.0f) + m.f32()[i]);
    EXPECT_FLOAT_EQ(n2.f32()[i], x.f32()[i] * s + m.f32()[i]);
  }
}

TEST(Schedulers, EverySchedulerMatchesGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  int checked = 0;
  for (const std::string& name : scheduler_names()) {
    for (int steps : {4, 20}) {
      const std::string key = "sigmas." + name + ".steps" + std::to_string(steps);
      auto ref = g->load(key, DType::F32);
      ASSERT_TRUE(ref.ok()) << ref.status().str();
      auto got = calculate_sigmas(ms, name, steps);
      ASSERT_TRUE(got.ok()) << got.status().str();
      expect_sigmas_near(*got, *ref, key);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 18);
  EXPECT_FALSE(calculate_sigmas(ms, "nope", 4).ok());
}

TEST(Schedulers, KSamplerDenoiseAndDiscardMatchGolden) {
  HR_GOLDEN_OR_FAIL(g);
  ModelSamplingDiscrete ms;
  for (const char* sched : {"karras", "normal"}) {
    for (int steps : {4, 20}) {
      const std::string key = std::string("sigmas.ksampler.") + sched + ".steps" +
                              std::to_string(steps) + ".denoise0.6";
      auto ref = g->load(key, DType::F32);
      ASSERT_TRUE(ref.ok()) << key;
      auto got = ksampler_sigmas(ms, sched, "euler", steps, 0.6);
      ASSERT_TRUE(got.ok());
      expect_sigmas_near(*got, *ref, key);
    }
  }
  auto ref = g->load("sigmas.ksampler.normal.steps20.sampler_dpm_2", DType::F32);
  ASSERT_TRUE(ref.ok());
  auto got = ksampler_sigmas(ms, "normal", "dpm_2", 20);
  ASSERT_TRUE(got.ok());
  expect_sigmas_near(*got, *ref, "sigmas.ksampler.normal.steps20.sampler_dpm_2");
  for (const char* s : {"euler", "euler_ancestral", "dpmpp_2m"}) {
    for (const char* sched : {"normal", "karras"}) {
      const std::string key = std::string("sampler.") + s + "." + sched + ".sigmas";
      auto r = g->load(key, DType::F32);
      ASSERT_TRUE(r.ok()) << key;
      auto k = ksampler_sigmas(ms, sched, s, 6);
      ASSERT_TRUE(k.ok());
      expect_sigmas_near(*k, *r, key);
    }
  }
}

TEST(Schedulers, KSamplerStepWindows) {
  ModelSamplingDiscrete ms;
  auto full = ksampler_sigmas(ms, "karras", "euler", 10);
  ASSERT_TRUE(full.ok());
  auto zero = ksampler_sigmas(ms, "karras", "euler", 10, 0.0);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->empty());
  auto head = ksampler_sigmas(ms, "karras", "euler", 10, 1.0, -1, 4, true);
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(head->size(), 5u);
  EXPECT_EQ(head->back(), 0.0f);
  EXPECT_EQ((*head)[3], (*full)[3]);
  auto tail = ksampler_sigmas(ms, "karras", "euler", 10, 1.0, 4);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 7u);
  EXPECT_EQ(tail->front(), (*full)[4]);
  auto past = ksampler_sigmas(ms, "karras", "euler", 10, 1.0, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
  // The dpm_2 rule: steps + 2 values computed, the penultimate one dropped.
  auto d2 = ksampler_sigmas(ms, "karras", "dpm_2", 10);
  auto k11 = calculate_sigmas(ms, "karras", 11);
  ASSERT_TRUE(d2.ok() && k11.ok());
  ASSERT_EQ(d2->size(), 11u);
  EXPECT_EQ((*d2)[9], (*k11)[9]);
  EXPECT_EQ((*d2)[10], 0.0f);
}

TEST(Schedulers, BetaPpf) {
  EXPECT_EQ(beta_ppf(0.0, 0.6, 0.6), 0.0);
  EXPECT_EQ(beta_ppf(1.0, 0.6, 0.6), 1.0);
  EXPECT_NEAR(beta_ppf(0.5, 0.6, 0.6), 0.5, 1e-15);
  // Symmetry of Beta(a, a) and the closed form of Beta(1, 1) (uniform) and Beta(2, 1) (sqrt).
  for (double p : {0.01, 0.1, 0.3, 0.77, 0.95}) {
    EXPECT_NEAR(beta_ppf(p, 0.6, 0.6) + beta_ppf(1 - p, 0.6, 0.6), 1.0, 1e-13) << p;
    EXPECT_NEAR(beta_ppf(p, 1.0, 1.0), p, 1e-14);
    EXPECT_NEAR(beta_ppf(p, 2.0, 1.0), std::sqrt(p), 1e-14);
  }
}

}  // namespace
}  // namespace hr
