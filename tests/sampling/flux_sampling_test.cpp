// Flux sampling against ComfyUI's own code (tests/data/flux/README.md): ModelSamplingFlux (the
// family default and the ModelSamplingFlux node's resolution shift) and schnell's
// ModelSamplingDiscreteFlow, every scheduler on them, the CONST arithmetic, the Flux latent
// format, and every sampler's trajectory on a toy network under CONST (Note [flow samplers]).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "golden_sampling.h"
#include "models/latent_formats.h"
#include "sampling/latent_preview.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/schedulers.h"
#include "test_safetensors.h"

namespace hr {
namespace {

const test::GoldenFile& golden_data() {
  static const test::GoldenFile g("flux/sampling_golden.safetensors");
  return g;
}
const SafetensorsFile* golden() { return golden_data().file(); }
HostTensor golden_ref(const std::string& name) { return golden_data().f32(name); }

// Element-wise units in the last place, <= max_ulp; a NaN must meet a NaN.
void expect_ulps(const float* got, const HostTensor& want, int64_t n, int64_t max_ulp,
                 const std::string& what) {
  ASSERT_EQ(n, want.numel()) << what;
  std::vector<float> a(got, got + n), b(want.f32(), want.f32() + n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::isnan(a[size_t(i)]), std::isnan(b[size_t(i)])) << what << " [" << i << "]";
    if (std::isnan(a[size_t(i)]) && std::isnan(b[size_t(i)])) a[size_t(i)] = b[size_t(i)] = 0.0f;
  }
  test::FloatDiff d = test::float_diff(a.data(), b.data(), n);
  std::printf("  %-40s n=%-5lld exact %.3f max_ulp %lld\n", what.c_str(), (long long)n,
              d.exact_fraction(), (long long)d.max_ulp);
  EXPECT_LE(d.max_ulp, max_ulp) << what;
}

// Relative error max|got - want| / max|want|, <= tol.
void expect_close(const HostTensor& got, const HostTensor& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  test::FloatDiff d = test::float_diff(got.f32(), want.f32(), got.numel());
  std::printf("  %-40s exact %.3f max_ulp %-6lld rel %.2e\n", what.c_str(), d.exact_fraction(),
              (long long)d.max_ulp, d.max_rel);
  EXPECT_LE(d.max_rel, tol) << what;
}

struct FluxCase {
  const char* tag;
  ModelSamplingSpec spec;
};

ModelSamplingSpec flux_spec(double shift) {
  ModelSamplingSpec s;
  s.kind = ModelSamplingSpec::Kind::FLUX;
  s.shift = shift;
  return s;
}

// The cases make_sampling_golden.py made, as headroom names them: comfy/supported_models.py Flux
// (ModelType.FLUX, shift 1.15) and FluxSchnell (ModelType.FLOW, shift 1, multiplier 1), and the
// ModelSamplingFlux node at three sizes.
std::vector<FluxCase> cases() {
  ModelSamplingSpec schnell;
  schnell.kind = ModelSamplingSpec::Kind::FLOW;
  schnell.shift = 1.0;
  schnell.multiplier = 1.0;
  return {{"dev", flux_spec(1.15)},
          {"schnell", schnell},
          {"node1024", flux_spec(flux_resolution_shift(1.15, 0.5, 1024, 1024))},
          {"node512x768", flux_spec(flux_resolution_shift(1.15, 0.5, 512, 768))},
          {"node1920x1088", flux_spec(flux_resolution_shift(2.0, 0.25, 1920, 1088))}};
}

TEST(FluxSampling, ShiftTableTimestepAndSigmaMatchComfyUI) {
  ASSERT_NE(golden(), nullptr) << "tests/data/flux/sampling_golden.safetensors";
  for (const FluxCase& c : cases()) {
    const std::string t = c.tag;
    std::unique_ptr<ModelSampling> ms = model_sampling_create(c.spec);
    EXPECT_EQ(ms->prediction(), SamplingPrediction::CONST) << t;
    EXPECT_EQ(float(c.spec.shift), golden_ref(t + ".shift").f32()[0]) << t;
    EXPECT_EQ(float(ms->sigmas().size()), golden_ref(t + ".table_len").f32()[0]) << t;
    HostTensor idx = golden_ref(t + ".table_idx");
    std::vector<float> table;
    for (int64_t i = 0; i < idx.numel(); ++i) table.push_back(ms->sigmas()[size_t(idx.f32()[i])]);
    expect_ulps(table.data(), golden_ref(t + ".table"), int64_t(table.size()), 0, t + " table");
    HostTensor probe = golden_ref(t + ".probe");
    std::vector<float> ts, sig;
    for (int64_t i = 0; i < probe.numel(); ++i) {
      ts.push_back(ms->timestep(probe.f32()[i]));
      sig.push_back(ms->sigma(probe.f32()[i]));
    }
    expect_ulps(ts.data(), golden_ref(t + ".timestep"), int64_t(ts.size()), 0, t + " timestep");
    expect_ulps(sig.data(), golden_ref(t + ".sigma_of_t"), int64_t(sig.size()), 0, t + " sigma(t)");
    HostTensor pct = golden_ref(t + ".percent");
    std::vector<float> ps;
    for (int64_t i = 0; i < pct.numel(); ++i) ps.push_back(ms->percent_to_sigma(pct.f32()[i]));
    expect_ulps(ps.data(), golden_ref(t + ".percent_to_sigma"), int64_t(ps.size()), 0,
                t + " percent_to_sigma");
  }
}

TEST(FluxSampling, EverySchedulerMatchesComfyUI) {
  ASSERT_NE(golden(), nullptr);
  for (const FluxCase& c : cases()) {
    std::unique_ptr<ModelSampling> ms = model_sampling_create(c.spec);
    for (const char* name : {"simple", "normal", "sgm_uniform", "ddim_uniform", "beta",
                             "linear_quadratic", "karras", "exponential", "kl_optimal"}) {
      for (int steps : {1, 4, 20}) {
        const std::string key = std::string(c.tag) + "." + name + "." + std::to_string(steps);
        Result<std::vector<float>> got = calculate_sigmas(*ms, name, steps);
        ASSERT_TRUE(got.ok()) << key << ": " << got.status().str();
        // As in flow_sampling_test.cpp: the float32 schedules agree to a few bits; karras /
        // exponential / kl_optimal go through transcendental functions that libm and torch may
        // round differently in the last bit. exponential is exp(linspace(log sigma_max, log
        // sigma_min)), and torch's vectorized linspace fills 8-lane chunks from the start side
        // where schedulers.cpp counts the second half down from the end: a last-bit difference
        // in log sigma ~ -9 (Flux's sigma_min at a shift below 1) is ~8 ulps after exp.
        const int64_t ulps = std::string(name) == "exponential" ? 8 : 4;
        expect_ulps(got->data(), golden_ref(key), int64_t(got->size()), ulps, key);
      }
    }
  }
}

TEST(FluxSampling, ConstArithmeticMatchesComfyUI) {
  ASSERT_NE(golden(), nullptr);
  const ModelSamplingFlux ms(flux_resolution_shift(1.15, 0.5, 1024, 1024));
  HostTensor x = golden_ref("const.x"), noise = golden_ref("const.noise"), out = golden_ref("const.out");
  const float sigma = golden_ref("const.sigma").f32()[0];
  HostTensor in = ms.calculate_input(x, sigma);
  HostTensor den = ms.calculate_denoised(sigma, out, x);
  HostTensor noised = ms.noise_scaling(sigma, noise, x, true);  // CONST ignores max_denoise
  HostTensor inv = ms.inverse_noise_scaling(sigma, x.clone());
  expect_ulps(in.f32(), golden_ref("const.input"), in.numel(), 0, "calculate_input");
  expect_ulps(den.f32(), golden_ref("const.denoised"), den.numel(), 0, "calculate_denoised");
  expect_ulps(noised.f32(), golden_ref("const.noised"), noised.numel(), 0, "noise_scaling");
  expect_ulps(inv.f32(), golden_ref("const.inverse"), inv.numel(), 0, "inverse_noise_scaling");
}

TEST(FluxSampling, LatentFormatMatchesComfyUI) {
  ASSERT_NE(golden(), nullptr);
  const LatentFormat f = latent_format_flux();
  EXPECT_EQ(f.channels, 16);
  EXPECT_EQ(f.scale_factor, golden_ref("latent.scale_factor").f32()[0]);
  EXPECT_EQ(f.shift_factor, golden_ref("latent.shift_factor").f32()[0]);
  HostTensor rgb = golden_ref("latent.rgb_factors"), bias = golden_ref("latent.rgb_bias");
  ASSERT_EQ(rgb.numel(), 48);
  ASSERT_EQ(f.rgb_factors.size(), 16u);
  for (size_t k = 0; k < 16; ++k)
    for (size_t c = 0; c < 3; ++c) EXPECT_EQ(f.rgb_factors[k][c], rgb.f32()[k * 3 + c]) << k;
  for (size_t c = 0; c < 3; ++c) EXPECT_EQ(f.rgb_bias[c], bias.f32()[c]);
  HostTensor x = golden_ref("const.x");
  HostTensor in = x.clone(), out = x.clone();
  f.process_in(in.f32(), in.numel());
  f.process_out(out.f32(), out.numel());
  expect_ulps(in.f32(), golden_ref("latent.in"), in.numel(), 0, "process_in");
  expect_ulps(out.f32(), golden_ref("latent.out"), out.numel(), 0, "process_out");
}

// The latent2rgb preview reads the model-space x0 with the format's 16 x 3 factors and bias
// (latent_preview.py Latent2RGBPreviewer; no process_out), pixels as latent_preview_test.cpp.
TEST(FluxSampling, PreviewUsesTheFluxFactors) {
  const LatentFormat f = latent_format_flux();
  HostTensor x(DType::F32, Shape{1, 16, 1, 2});
  x.f32()[15 * 2 + 1] = 1.0f;  // channel 15 at pixel 1; pixel 0 all zero
  Result<Image8> img = latent_preview(x, f);
  ASSERT_TRUE(img.ok()) << img.status().str();
  EXPECT_EQ(img->width, 2);
  EXPECT_EQ(img->height, 1);
  EXPECT_EQ(img->pixels[0], 123);  // round((1 - 0.0329) / 2 * 255): the bias alone
  EXPECT_EQ(img->pixels[1], 118);  // round((1 - 0.0718) / 2 * 255)
  EXPECT_EQ(img->pixels[3], 107);  // round((1 - 0.1262 - 0.0329) / 2 * 255)
  EXPECT_EQ(img->pixels[5], 107);  // round((1 - 0.0778 - 0.0851) / 2 * 255)
  HostTensor four(DType::F32, Shape{1, 4, 1, 2});
  EXPECT_FALSE(latent_preview(four, f).ok());  // a 4-channel latent is not Flux's
}

// SD's formats have no shift: process_in / process_out are the plain scale, bit for bit.
TEST(FluxSampling, UnshiftedFormatIsThePlainScale) {
  LatentFormat sd;
  sd.scale_factor = 0.18215f;
  const float xs[] = {-0.0f, 0.0f, 1.5f, -3.25f, 1e-30f};
  for (float v : xs) {
    float a = v, b = v;
    sd.process_in(&a, 1);
    sd.process_out(&b, 1);
    EXPECT_EQ(std::signbit(a), std::signbit(v * 0.18215f));
    EXPECT_EQ(a, v * 0.18215f);
    EXPECT_EQ(std::signbit(b), std::signbit(v / 0.18215f));
    EXPECT_EQ(b, v / 0.18215f);
  }
}

// KSAMPLER.sample on the toy network raw = 0.5 x_in + bias * timestep(sigma) under
// ModelSamplingFlux (1024x1024 shift): every sampler headroom has, from sigma 1 ("full":
// simple(6)) and from a partly denoised latent ("part": the last 5 steps of simple(8)). The
// ancestral samplers draw from the seed's CPU generator, the SDE ones from its Brownian tree.
TEST(FluxSampling, EverySamplerTrajectoryMatchesComfyUI) {
  ASSERT_NE(golden(), nullptr);
  const ModelSamplingFlux ms(flux_resolution_shift(1.15, 0.5, 1024, 1024));
  const HostTensor bias = golden_ref("traj.bias"), latent = golden_ref("traj.latent"), noise = golden_ref("const.noise");
  const uint64_t seed = uint64_t(golden_ref("traj.seed").f32()[0]);
  DenoiseFn model = [&](const HostTensor& x, float s) -> Result<HostTensor> {
    HostTensor raw = ms.calculate_input(x, s);
    const float t = ms.timestep(s);
    for (int64_t i = 0; i < raw.numel(); ++i)
      raw.f32()[i] = 0.5f * raw.f32()[i] + bias.f32()[i] * t;
    return ms.calculate_denoised(s, raw, x);
  };
  for (const char* sched : {"full", "part"}) {
    const std::string p = std::string("traj.") + sched;
    HostTensor sig = golden_ref(p + ".sigmas");
    const std::vector<float> sigmas(sig.f32(), sig.f32() + sig.numel());
    HostTensor start = sample_initial_x(ms, noise, latent, sigmas[0]);
    expect_ulps(start.f32(), golden_ref(p + ".start"), start.numel(), 0, p + " start");
    for (const std::string& name : sampler_names()) {
      // Added after this golden; their ComfyUI trajectories under flow model sampling are in
      // tests/data/zimage/sampling_golden.safetensors (zimage_sampling_test.cpp).
      if (name == "res_multistep" || name == "res_multistep_ancestral") continue;
      SCOPED_TRACE(p + " " + name);
      // ComfyUI's KSampler runs "ddim" as euler (comfy/samplers.py sampler_object).
      const std::string golden_name = name == "ddim" ? "euler" : name;
      SampleParams params;
      params.sampler = name;
      params.sigmas = sigmas;
      params.seed = seed;
      std::vector<HostTensor> steps;
      params.callback = [&](int, int, const HostTensor& x, const HostTensor&) {
        steps.push_back(x.clone());
      };
      Result<HostTensor> end = sample(ms, model, noise, latent, params);
      ASSERT_TRUE(end.ok()) << end.status().str();
      HostTensor want_steps = golden_ref(p + "." + golden_name + ".x_steps");
      ASSERT_EQ(int64_t(steps.size()), want_steps.shape()[0]);
      HostTensor got_steps(DType::F32, want_steps.shape());
      for (size_t i = 0; i < steps.size(); ++i)
        std::copy(steps[i].f32(), steps[i].f32() + steps[i].numel(),
                  got_steps.f32() + int64_t(i) * steps[i].numel());
      // float32 throughout, within ~3e-7: torch randn's last bits (Note [torch cpu randn]) and
      // log / exp / expm1 rounding in the sigma arithmetic keep it from being bitwise.
      expect_close(got_steps, want_steps, 1e-6, p + " " + name + " steps");
      expect_close(*end, golden_ref(p + "." + golden_name + ".end"), 1e-6, p + " " + name + " end");
    }
  }
}

}  // namespace
}  // namespace hr
