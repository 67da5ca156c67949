// Flow-matching model sampling (ModelSamplingDiscreteFlow with CONST prediction) against
// ComfyUI's own code: tables, sigma <-> timestep, percent_to_sigma, every scheduler on a flow
// schedule, the CONST arithmetic and one Euler trajectory (tests/data/golden/flow/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "golden_sampling.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/schedulers.h"

namespace hr {
namespace {

const SafetensorsFile* golden_flow() {
  static const std::unique_ptr<SafetensorsFile> file = test::golden_file("flow/golden-flow.safetensors");
  return file.get();
}

HostTensor flow_ref(const std::string& name) {
  Result<HostTensor> t = golden_flow()->load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

// Largest distance in units in the last place, asserted <= max_ulp element by element. A NaN
// must meet a NaN (kl_optimal with one step divides 0 by 0 in ComfyUI too), whatever its bits.
void expect_ulps(const float* got, const HostTensor& want, int64_t n, int64_t max_ulp,
                 const std::string& what) {
  ASSERT_EQ(n, want.numel()) << what;
  std::vector<float> a(got, got + n), b(want.f32(), want.f32() + n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::isnan(a[size_t(i)]), std::isnan(b[size_t(i)])) << what << " [" << i << "]";
    if (std::isnan(a[size_t(i)]) && std::isnan(b[size_t(i)])) a[size_t(i)] = b[size_t(i)] = 0.0f;
  }
  test::FloatDiff d = test::float_diff(a.data(), b.data(), n);
  std::printf("  %-34s n=%-4lld exact %.3f max_ulp %lld\n", what.c_str(), (long long)n,
              d.exact_fraction(), (long long)d.max_ulp);
  EXPECT_LE(d.max_ulp, max_ulp) << what;
}

struct FlowCase {
  const char* tag;
  double shift, multiplier;
};
const FlowCase kCases[] = {{"s3", 3.0, 1000.0}, {"s1", 1.0, 1000.0}, {"s6m1", 6.0, 1.0}};

TEST(FlowSampling, TableTimestepAndSigmaMatchComfyUI) {
  ASSERT_NE(golden_flow(), nullptr) << "tests/data/golden/flow/golden-flow.safetensors";
  for (const FlowCase& c : kCases) {
    ModelSamplingDiscreteFlow ms(c.shift, c.multiplier);
    const std::string t = c.tag;
    expect_ulps(ms.sigmas().data(), flow_ref(t + ".sigmas"), int64_t(ms.sigmas().size()), 0,
                t + " sigmas");
    HostTensor probe = flow_ref(t + ".probe_sigma"), probe_t = flow_ref(t + ".probe_t");
    std::vector<float> ts, sig;
    for (int64_t i = 0; i < probe.numel(); ++i) ts.push_back(ms.timestep(probe.f32()[i]));
    for (int64_t i = 0; i < probe_t.numel(); ++i) sig.push_back(ms.sigma(probe_t.f32()[i]));
    expect_ulps(ts.data(), flow_ref(t + ".timestep"), int64_t(ts.size()), 0, t + " timestep");
    expect_ulps(sig.data(), flow_ref(t + ".sigma_of_t"), int64_t(sig.size()), 0, t + " sigma(t)");
    HostTensor pct = flow_ref(t + ".percent");
    std::vector<float> ps;
    for (int64_t i = 0; i < pct.numel(); ++i) ps.push_back(ms.percent_to_sigma(pct.f32()[i]));
    expect_ulps(ps.data(), flow_ref(t + ".percent_to_sigma"), int64_t(ps.size()), 0,
                t + " percent_to_sigma");
  }
}

TEST(FlowSampling, EverySchedulerMatchesComfyUI) {
  ASSERT_NE(golden_flow(), nullptr);
  for (const FlowCase& c : kCases) {
    ModelSamplingDiscreteFlow ms(c.shift, c.multiplier);
    for (const char* name : {"simple", "normal", "sgm_uniform", "ddim_uniform", "beta",
                             "linear_quadratic", "karras", "exponential", "kl_optimal"}) {
      for (int steps : {1, 4, 9}) {
        const std::string key = std::string(c.tag) + "." + name + "." + std::to_string(steps);
        Result<std::vector<float>> got = calculate_sigmas(ms, name, steps);
        ASSERT_TRUE(got.ok()) << key << ": " << got.status().str();
        // The float32 schedulers agree to the bit; karras / exponential / kl_optimal evaluate
        // transcendental functions whose last bit libm and torch may round differently.
        expect_ulps(got->data(), flow_ref(key), int64_t(got->size()), 4, key);
      }
    }
  }
}

TEST(FlowSampling, ConstArithmeticMatchesComfyUI) {
  ASSERT_NE(golden_flow(), nullptr);
  ModelSamplingDiscreteFlow ms(3.0);
  ASSERT_EQ(ms.prediction(), SamplingPrediction::CONST);
  HostTensor x = flow_ref("const.x"), noise = flow_ref("const.noise"), out = flow_ref("const.out");
  const float sigma = flow_ref("const.sigma").f32()[0];
  HostTensor in = ms.calculate_input(x, sigma);
  HostTensor den = ms.calculate_denoised(sigma, out, x);
  HostTensor noised = ms.noise_scaling(sigma, noise, x, true);  // CONST ignores max_denoise
  HostTensor inv = ms.inverse_noise_scaling(sigma, x.clone());
  expect_ulps(in.f32(), flow_ref("const.input"), in.numel(), 0, "calculate_input");
  expect_ulps(den.f32(), flow_ref("const.denoised"), den.numel(), 0, "calculate_denoised");
  expect_ulps(noised.f32(), flow_ref("const.noised"), noised.numel(), 0, "noise_scaling");
  expect_ulps(inv.f32(), flow_ref("const.inverse"), inv.numel(), 0, "inverse_noise_scaling");
}

// The KSampler flow (sample()) on a flow schedule: noise_scaling with CONST, Euler steps on
// denoised values from calculate_denoised, inverse_noise_scaling at the end.
TEST(FlowSampling, EulerTrajectoryMatchesComfyUI) {
  ASSERT_NE(golden_flow(), nullptr);
  ModelSamplingDiscreteFlow ms(3.0);
  HostTensor x = flow_ref("const.x"), noise = flow_ref("const.noise"), bias = flow_ref("euler.bias");
  Result<std::vector<float>> sigmas = calculate_sigmas(ms, "simple", 6);
  ASSERT_TRUE(sigmas.ok());
  expect_ulps(sigmas->data(), flow_ref("euler.sigmas"), int64_t(sigmas->size()), 0, "euler sigmas");
  DenoiseFn model = [&](const HostTensor& xx, float s) -> Result<HostTensor> {
    HostTensor raw = ms.calculate_input(xx, s);
    for (int64_t i = 0; i < raw.numel(); ++i) raw.f32()[i] = 0.5f * raw.f32()[i] + bias.f32()[i];
    return ms.calculate_denoised(s, raw, xx);
  };
  HostTensor start = sample_initial_x(ms, noise, x, (*sigmas)[0]);
  expect_ulps(start.f32(), flow_ref("euler.start"), start.numel(), 0, "euler start");
  SampleParams p;
  p.sampler = "euler";
  p.sigmas = *sigmas;
  Result<HostTensor> end = sample(ms, model, noise, x, p);
  ASSERT_TRUE(end.ok()) << end.status().str();
  expect_ulps(end->f32(), flow_ref("euler.end"), end->numel(), 2, "euler end");
}

// The samplers with a flow form run it for a CONST model (Note [flow samplers]; trajectories
// against ComfyUI in flux_sampling_test.cpp) and their first form for a discrete one.
TEST(FlowSampling, SamplersWithAFlowFormRunForBothPredictions) {
  ModelSamplingDiscreteFlow ms(3.0);
  ModelSamplingDiscrete eps;
  HostTensor x(DType::F32, Shape{1, 4, 2, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.1f * float(i);
  DenoiseFn model = [](const HostTensor& xx, float) -> Result<HostTensor> {
    HostTensor d = xx.clone();
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] *= 0.5f;
    return d;
  };
  SampleParams p;
  p.sigmas = {1.0f, 0.5f, 0.25f, 0.0f};
  for (const char* name : {"euler_ancestral", "dpm_2_ancestral", "dpmpp_2s_ancestral",
                           "dpmpp_sde", "dpmpp_2m_sde"}) {
    EXPECT_TRUE(sampler_branches_on_flow(name)) << name;
    p.sampler = name;
    Result<HostTensor> flow = sample(ms, model, x, x, p);
    Result<HostTensor> discrete = sample(eps, model, x, x, p);
    ASSERT_TRUE(flow.ok()) << name << ": " << flow.status().str();
    ASSERT_TRUE(discrete.ok()) << name << ": " << discrete.status().str();
    EXPECT_GT(test::float_diff(flow->f32(), discrete->f32(), x.numel()).max_abs, 0.0) << name;
  }
}

}  // namespace
}  // namespace hr
