// Z-Image sampling against ComfyUI's own code (tests/data/zimage/README.md): the model sampling
// of the ModelSamplingAuraFlow node (ModelSamplingDiscreteFlow, multiplier 1; shift 3 as the
// Z-Image template sets it, and the node's default 1.73) and of ModelSamplingSD3 (multiplier
// 1000), the simple scheduler on them, and the res_multistep samplers' trajectories on a toy
// network under shift 3 (Note [res_multistep]).
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
#include "test_safetensors.h"

namespace hr {
namespace {

const test::GoldenFile& golden_data() {
  static const test::GoldenFile g("zimage/sampling_golden.safetensors");
  return g;
}
const SafetensorsFile* golden() { return golden_data().file(); }
HostTensor golden_ref(const std::string& name) { return golden_data().f32(name); }

std::vector<float> values(const HostTensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// Relative error max|got - want| / max|want|, <= tol.
void expect_close(const float* got, const HostTensor& want, int64_t n, double tol,
                  const std::string& what) {
  ASSERT_EQ(n, want.numel()) << what;
  // float_diff's max skips NaN: a NaN or inf where ComfyUI has a number fails here.
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::isfinite(got[i]), std::isfinite(want.f32()[i])) << what << " [" << i << "]";
  test::FloatDiff d = test::float_diff(got, want.f32(), n);
  std::printf("  %-44s n=%-4lld exact %.3f max_ulp %-6lld rel %.2e\n", what.c_str(), (long long)n,
              d.exact_fraction(), (long long)d.max_ulp, d.max_rel);
  EXPECT_LE(d.max_rel, tol) << what;
}

struct FlowCase {
  const char* tag;
  double shift;
  double multiplier;
};

// make_sampling_golden.py's cases: ModelSamplingAuraFlow at 3 and 1.73, ModelSamplingSD3 at 3.
const FlowCase kCases[] = {{"aura3", 3.0, 1.0}, {"aura173", 1.73, 1.0}, {"sd3", 3.0, 1000.0}};

ModelSamplingSpec flow_spec(const FlowCase& c) {
  ModelSamplingSpec s;
  s.kind = ModelSamplingSpec::Kind::FLOW;
  s.shift = c.shift;
  s.multiplier = c.multiplier;
  return s;
}

TEST(ZImageSampling, FlowTableTimestepAndSigmaMatchComfyUI) {
  ASSERT_NE(golden(), nullptr) << "tests/data/zimage/sampling_golden.safetensors";
  for (const FlowCase& c : kCases) {
    const std::string t = c.tag;
    std::unique_ptr<ModelSampling> ms = model_sampling_create(flow_spec(c));
    EXPECT_EQ(ms->prediction(), SamplingPrediction::CONST) << t;
    EXPECT_EQ(float(c.shift), golden_ref(t + ".shift").f32()[0]) << t;
    EXPECT_EQ(float(c.multiplier), golden_ref(t + ".multiplier").f32()[0]) << t;
    EXPECT_EQ(float(ms->sigmas().size()), golden_ref(t + ".table_len").f32()[0]) << t;
    std::vector<float> table;
    for (float i : values(golden_ref(t + ".table_idx"))) table.push_back(ms->sigmas()[size_t(i)]);
    expect_close(table.data(), golden_ref(t + ".table"), int64_t(table.size()), 1e-6, t + " table");
    std::vector<float> ts, sig;
    for (float p : values(golden_ref(t + ".probe"))) {
      ts.push_back(ms->timestep(p));
      sig.push_back(ms->sigma(p * float(c.multiplier)));
    }
    expect_close(ts.data(), golden_ref(t + ".timestep"), int64_t(ts.size()), 1e-6, t + " timestep");
    expect_close(sig.data(), golden_ref(t + ".sigma_of_t"), int64_t(sig.size()), 1e-6,
                 t + " sigma(t)");
    std::vector<float> ps;
    for (float p : values(golden_ref(t + ".percent"))) ps.push_back(ms->percent_to_sigma(p));
    expect_close(ps.data(), golden_ref(t + ".percent_to_sigma"), int64_t(ps.size()), 1e-6,
                 t + " percent_to_sigma");
  }
}

TEST(ZImageSampling, SimpleSchedulerMatchesComfyUI) {
  ASSERT_NE(golden(), nullptr);
  for (const FlowCase& c : kCases) {
    std::unique_ptr<ModelSampling> ms = model_sampling_create(flow_spec(c));
    for (int steps : {1, 8, 20}) {
      const std::string key = std::string(c.tag) + ".simple." + std::to_string(steps);
      Result<std::vector<float>> got = calculate_sigmas(*ms, "simple", steps);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status().str();
      expect_close(got->data(), golden_ref(key), int64_t(got->size()), 1e-6, key);
    }
  }
}

// KSAMPLER.sample on the toy network raw = 0.5 x_in + bias * timestep(sigma) under
// ModelSamplingAuraFlow(shift 3): res_multistep and res_multistep_ancestral from sigma 1
// ("full": simple(8)) and from a partly denoised latent ("part": the last 5 sigmas). The
// ancestral one draws from the seed's CPU generator; its flow model takes get_ancestral_step's
// split as a discrete model would (Note [res_multistep]).
TEST(ZImageSampling, ResMultistepTrajectoriesMatchComfyUI) {
  ASSERT_NE(golden(), nullptr);
  const ModelSamplingDiscreteFlow ms(3.0, 1.0);
  const HostTensor bias = golden_ref("traj.bias"), latent = golden_ref("traj.latent"),
                   noise = golden_ref("traj.noise");
  const uint64_t seed = uint64_t(golden_ref("traj.seed").f32()[0]);
  DenoiseFn model = [&](const HostTensor& x, float s) -> Result<HostTensor> {
    HostTensor raw = ms.calculate_input(x, s);
    const float t = ms.timestep(s);
    for (int64_t i = 0; i < raw.numel(); ++i)
      raw.f32()[i] = 0.5f * raw.f32()[i] + bias.f32()[i] * t;
    return ms.calculate_denoised(s, raw, x);
  };
  Result<std::vector<float>> simple8 = calculate_sigmas(ms, "simple", 8);
  ASSERT_TRUE(simple8.ok());
  for (const char* sched : {"full", "part"}) {
    const std::string p = std::string("traj.") + sched;
    const std::vector<float> sigmas = values(golden_ref(p + ".sigmas"));
    if (std::string(sched) == "full")
      expect_close(simple8->data(), golden_ref(p + ".sigmas"), int64_t(simple8->size()), 1e-6,
                   p + " sigmas (simple, 8 steps)");
    HostTensor start = sample_initial_x(ms, noise, latent, sigmas[0]);
    expect_close(start.f32(), golden_ref(p + ".start"), start.numel(), 1e-6, p + " start");
    for (const char* name : {"res_multistep", "res_multistep_ancestral"}) {
      SCOPED_TRACE(p + " " + name);
      SampleParams params;
      params.sampler = name;
      params.sigmas = sigmas;
      params.seed = seed;
      std::vector<float> xs, ds;
      params.callback = [&](int, int, const HostTensor& x, const HostTensor& d) {
        xs.insert(xs.end(), x.f32(), x.f32() + x.numel());
        ds.insert(ds.end(), d.f32(), d.f32() + d.numel());
      };
      Result<HostTensor> end = sample(ms, model, noise, latent, params);
      ASSERT_TRUE(end.ok()) << end.status().str();
      const std::string g = p + "." + name;
      expect_close(xs.data(), golden_ref(g + ".x_steps"), int64_t(xs.size()), 1e-5, g + " x steps");
      expect_close(ds.data(), golden_ref(g + ".denoised_steps"), int64_t(ds.size()), 1e-5,
                   g + " denoised steps");
      expect_close(end->f32(), golden_ref(g + ".end"), end->numel(), 1e-5, g + " end");
    }
  }
}

// The ancestral form adds noise: it differs from res_multistep on the same inputs, and at eta 0
// it is res_multistep.
TEST(ZImageSampling, ResMultistepAncestralEtaZeroIsResMultistep) {
  ASSERT_NE(golden(), nullptr);
  const ModelSamplingDiscreteFlow ms(3.0, 1.0);
  const HostTensor noise = golden_ref("traj.noise"), latent = golden_ref("traj.latent");
  DenoiseFn model = [](const HostTensor& x, float) -> Result<HostTensor> {
    HostTensor d = x.clone();
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] *= 0.25f;
    return d;
  };
  const std::vector<float> sigmas = values(golden_ref("traj.full.sigmas"));
  auto run = [&](const char* name, double eta) {
    SampleParams params;
    params.sampler = name;
    params.sigmas = sigmas;
    params.seed = 7;
    params.eta = eta;
    Result<HostTensor> r = sample(ms, model, noise, latent, params);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? values(*r) : std::vector<float>();
  };
  const std::vector<float> plain = run("res_multistep", 1.0);
  EXPECT_EQ(run("res_multistep_ancestral", 0.0), plain);
  const std::vector<float> anc = run("res_multistep_ancestral", 1.0);
  ASSERT_EQ(anc.size(), plain.size());
  EXPECT_GT(test::float_diff(anc.data(), plain.data(), int64_t(anc.size())).max_abs, 1e-3);
  EXPECT_FALSE(sampler_needs_noise("res_multistep"));
  EXPECT_TRUE(sampler_needs_noise("res_multistep_ancestral"));
  EXPECT_FALSE(sampler_branches_on_flow("res_multistep"));
  EXPECT_FALSE(sampler_branches_on_flow("res_multistep_ancestral"));
}

}  // namespace
}  // namespace hr
