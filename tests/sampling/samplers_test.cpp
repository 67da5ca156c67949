// Sampler arithmetic without a network: closed-form invariants, convergence to the exact
// probability-flow ODE solution of a Gaussian toy problem, distribution checks for the
// stochastic samplers, callbacks and interruption.
#include "sampling/samplers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "sampling/model_sampling.h"
#include "sampling/schedulers.h"
#include "sampling/torch_rng.h"

namespace hr {
namespace {

HostTensor filled(const Shape& shape, float start, float step) {
  HostTensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = start + step * float(i);
  return t;
}

// The exact denoiser for data x0 ~ N(mu, sd^2) per element: E[x0 | x0 + sigma n = x].
struct GaussianToy {
  float mu = 0.3f;
  float sd = 0.5f;
  DenoiseFn denoiser() const {
    return [mu = mu, sd = sd](const HostTensor& x, float sigma) -> Result<HostTensor> {
      HostTensor o(x.desc());
      const double k = double(sd) * sd / (double(sd) * sd + double(sigma) * sigma);
      for (int64_t i = 0; i < x.numel(); ++i) o.f32()[i] = float(mu + k * (x.f32()[i] - mu));
      return o;
    };
  }
  // The probability-flow ODE dx/dsigma = (x - D(x)) / sigma keeps (x - mu) / sqrt(sd^2 + sigma^2)
  // constant.
  double solve(double x_from, double s_from, double s_to) const {
    return mu + (x_from - mu) * std::sqrt((sd * sd + s_to * s_to) / (sd * sd + s_from * s_from));
  }
};

std::vector<float> karras_without_zero(int n) {
  ModelSamplingDiscrete ms;
  std::vector<float> s = sigmas_karras(n, ms.sigma_min(), ms.sigma_max());
  s.pop_back();
  return s;
}

double max_error_vs_ode(std::string_view sampler, int steps) {
  GaussianToy toy;
  const std::vector<float> s = karras_without_zero(steps + 1);
  HostTensor x0 = filled(Shape{1, 1, 4, 8}, -20.0f, 1.25f);
  SamplerOptions opt;
  auto out = sampler_run(sampler, toy.denoiser(), x0.clone(), s, opt);
  EXPECT_TRUE(out.ok()) << out.status().str();
  if (!out.ok()) return 1e9;
  double worst = 0;
  for (int64_t i = 0; i < x0.numel(); ++i) {
    const double exact = toy.solve(x0.f32()[i], s.front(), s.back());
    worst = std::max(worst, std::fabs(out->f32()[i] - exact));
  }
  return worst;
}

TEST(Samplers, Names) {
  for (const char* n : {"euler", "euler_ancestral", "heun", "dpm_2", "dpm_2_ancestral", "lms",
                        "dpmpp_2s_ancestral", "dpmpp_2m"}) {
    EXPECT_TRUE(sampler_is_implemented(n)) << n;
  }
  EXPECT_FALSE(sampler_is_implemented("no_such_sampler"));
  SamplerOptions opt;
  auto r = sampler_run("no_such_sampler", GaussianToy().denoiser(),
                       HostTensor(DType::F32, Shape{1}), {1.0f, 0.0f}, opt);
  EXPECT_EQ(r.status().code(), ErrorCode::UNSUPPORTED);
}

TEST(Samplers, EulerWithZeroDenoiserScalesBySigmaRatio) {
  DenoiseFn zero = [](const HostTensor& x, float) -> Result<HostTensor> {
    return HostTensor(x.desc());
  };
  const std::vector<float> s = {14.6f, 7.0f, 2.5f, 0.4f};
  HostTensor x = filled(Shape{2, 4, 2, 2}, -3.0f, 0.21f);
  SamplerOptions opt;
  auto out = sampler_run("euler", zero, x.clone(), s, opt);
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double want = double(x.f32()[i]) * 0.4 / 14.6;
    EXPECT_NEAR(out->f32()[i], want, 1e-6 * std::fabs(x.f32()[i]) + 1e-7) << i;
  }
  // One step is the exact ratio up to one float rounding of each operation.
  auto one = sampler_run("euler", zero, x.clone(), {14.6f, 7.0f}, opt);
  ASSERT_TRUE(one.ok());
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_NEAR(one->f32()[i], x.f32()[i] * (7.0f / 14.6f), 4e-7f * std::fabs(x.f32()[i]));
  }
}

TEST(Samplers, Dpmpp2mFirstStepIsExponentialEuler) {
  GaussianToy toy;
  const std::vector<float> s = {10.0f, 3.0f};
  HostTensor x = filled(Shape{1, 4, 2, 2}, -5.0f, 0.7f);
  SamplerOptions opt;
  auto out = sampler_run("dpmpp_2m", toy.denoiser(), x.clone(), s, opt);
  ASSERT_TRUE(out.ok());
  auto den = toy.denoiser()(x, 10.0f);
  ASSERT_TRUE(den.ok());
  for (int64_t i = 0; i < x.numel(); ++i) {
    // x' = (s'/s) x + (1 - s'/s) D(x)
    const double want = 0.3 * x.f32()[i] + 0.7 * den->f32()[i];
    EXPECT_NEAR(out->f32()[i], want, 2e-6 * (1 + std::fabs(want)));
  }
  // The last step (to sigma 0) returns the denoised value.
  auto last = sampler_run("dpmpp_2m", toy.denoiser(), x.clone(), {3.0f, 0.0f}, opt);
  auto den3 = toy.denoiser()(x, 3.0f);
  ASSERT_TRUE(last.ok() && den3.ok());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_FLOAT_EQ(last->f32()[i], den3->f32()[i]);
}

TEST(Samplers, DeterministicSamplersConvergeToTheOdeSolution) {
  struct Case {
    const char* name;
    double order;  // expected convergence order (in step count)
  };
  for (Case c : {Case{"euler", 1}, Case{"ddim", 1}, Case{"heun", 2}, Case{"dpm_2", 2},
                 Case{"lms", 2}, Case{"dpmpp_2m", 2}}) {
    const double e10 = max_error_vs_ode(c.name, 10);
    const double e40 = max_error_vs_ode(c.name, 40);
    const double e160 = max_error_vs_ode(c.name, 160);
    std::printf("  %-10s max |x - ode|: 10 steps %.3g, 40 steps %.3g, 160 steps %.3g\n", c.name,
                e10, e40, e160);
    EXPECT_LT(e40, e10 / 2.5) << c.name;
    EXPECT_LT(e160, 2e-2) << c.name;
    if (c.order >= 2) {
      EXPECT_LT(e160, 2e-3) << c.name;
    }
  }
}

// Starting from x_T ~ N(mu, sd^2 + sigma_max^2), every sampler must end near N(mu, sd^2).
TEST(Samplers, AllSamplersReachTheDataDistribution) {
  GaussianToy toy;
  ModelSamplingDiscrete ms;
  const Shape shape{1, 4, 64, 64};
  for (const std::string& name : sampler_names()) {
    auto sig = ksampler_sigmas(ms, "karras", name, 100);
    ASSERT_TRUE(sig.ok());
    HostTensor x = randn_cpu(1234, shape);
    const float s0 = (*sig)[0];
    const float scale = std::sqrt(toy.sd * toy.sd + s0 * s0);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = toy.mu + x.f32()[i] * scale;
    NoiseGenerator gen(99);
    SamplerOptions opt;
    opt.noise = &gen;
    opt.model_sampling = &ms;
    auto out = sampler_run(name, toy.denoiser(), std::move(x), *sig, opt);
    ASSERT_TRUE(out.ok()) << name << ": " << out.status().str();
    double mean = 0, var = 0;
    const int64_t n = out->numel();
    for (int64_t i = 0; i < n; ++i) mean += out->f32()[i];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += (out->f32()[i] - mean) * (out->f32()[i] - mean);
    const double sd = std::sqrt(var / double(n));
    std::printf("  %-20s mean %.4f (want %.2f) sd %.4f (want %.2f)\n", name.c_str(), mean, toy.mu,
                sd, toy.sd);
    EXPECT_NEAR(mean, toy.mu, 0.03) << name;
    // lcm (a consistency-model sampler) jumps to D(x) and re-noises every step, which is not a
    // solver of this problem's SDE: its spread stays too small. All others sample N(mu, sd^2).
    if (name == "lcm") {
      EXPECT_LT(sd, toy.sd) << name;
    } else {
      EXPECT_NEAR(sd, toy.sd, 0.03) << name;
    }
  }
}

TEST(Samplers, AncestralNeedsNoiseGenerator) {
  SamplerOptions opt;
  auto r = sampler_run("euler_ancestral", GaussianToy().denoiser(),
                       HostTensor(DType::F32, Shape{1, 1, 1, 4}), {5.0f, 1.0f, 0.0f}, opt);
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
}

TEST(Samplers, EulerAncestralUsesOneDrawPerNonFinalStep) {
  // Matches the golden run's structure: 6 steps use draws 0-4.
  ModelSamplingDiscrete ms;
  auto sig = ksampler_sigmas(ms, "normal", "euler_ancestral", 6);
  ASSERT_TRUE(sig.ok());
  NoiseGenerator gen(42);
  SamplerOptions opt;
  opt.noise = &gen;
  auto out = sampler_run("euler_ancestral", GaussianToy().denoiser(),
                         randn_cpu(5, Shape{1, 4, 8, 8}), *sig, opt);
  ASSERT_TRUE(out.ok());
  NoiseGenerator ref(42);
  for (int k = 0; k < 5; ++k) ref.draw(Shape{1, 4, 8, 8});
  HostTensor a = gen.draw(Shape{1, 4, 8, 8}), b = ref.draw(Shape{1, 4, 8, 8});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0);
}

TEST(Samplers, CallbackAndInterrupt) {
  GaussianToy toy;
  const std::vector<float> s = {10.0f, 5.0f, 2.0f, 1.0f, 0.0f};
  std::vector<int> steps;
  int calls = 0;
  SamplerOptions opt;
  opt.callback = [&](int step, int total, const HostTensor& x, const HostTensor& den) {
    EXPECT_EQ(total, 4);
    EXPECT_EQ(x.shape(), den.shape());
    steps.push_back(step);
  };
  DenoiseFn counted = [&](const HostTensor& x, float sigma) {
    ++calls;
    return toy.denoiser()(x, sigma);
  };
  auto out = sampler_run("heun", counted, HostTensor(DType::F32, Shape{1, 1, 2, 2}), s, opt);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(calls, 7);  // heun: two calls per step, one on the last step to sigma 0

  int polls = 0;
  opt.callback = nullptr;
  opt.interrupted = [&] { return ++polls > 2; };
  auto stopped = sampler_run("euler", counted, HostTensor(DType::F32, Shape{1, 1, 2, 2}), s, opt);
  EXPECT_EQ(stopped.status().code(), ErrorCode::CANCELLED);
  EXPECT_EQ(polls, 3);
}

TEST(Samplers, DenoiserErrorsPropagate) {
  DenoiseFn failing = [](const HostTensor&, float) -> Result<HostTensor> {
    return Status(ErrorCode::OUT_OF_MEMORY, "no room");
  };
  SamplerOptions opt;
  auto r = sampler_run("dpmpp_2m", failing, HostTensor(DType::F32, Shape{1, 1, 1, 1}), {2.0f, 0.0f},
                       opt);
  EXPECT_EQ(r.status().code(), ErrorCode::OUT_OF_MEMORY);
}

TEST(Samplers, AncestralStep) {
  AncestralStep st = ancestral_step(10.0f, 5.0f);
  EXPECT_NEAR(st.up * st.up + st.down * st.down, 25.0f, 1e-4f);
  EXPECT_NEAR(st.up, std::sqrt(25.0f * 75.0f / 100.0f), 1e-5f);
  AncestralStep last = ancestral_step(1.0f, 0.0f);
  EXPECT_EQ(last.up, 0.0f);
  EXPECT_EQ(last.down, 0.0f);
  AncestralStep none = ancestral_step(10.0f, 5.0f, 0.0f);
  EXPECT_EQ(none.down, 5.0f);
  EXPECT_EQ(none.up, 0.0f);
}

}  // namespace
}  // namespace hr
