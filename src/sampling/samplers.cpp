// The sampler loops. Scalars derived from sigmas are float32 as in ComfyUI (its sigmas are 0-dim
// float32 tensors) and element-wise updates follow the Python expression order, so a run
// differs from ComfyUI's only by the denoiser's own rounding.
#include "sampling/samplers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sampling/brownian_tree.h"

namespace hr {

namespace {

const std::vector<std::string> kSamplerNames = {"euler",
                                                "euler_ancestral",
                                                "heun",
                                                "dpm_2",
                                                "dpm_2_ancestral",
                                                "lms",
                                                "dpmpp_2s_ancestral",
                                                "dpmpp_sde",
                                                "dpmpp_2m",
                                                "dpmpp_2m_sde",
                                                "ddpm",
                                                "lcm",
                                                "res_multistep",
                                                "res_multistep_ancestral",
                                                "ddim"};

// Sampling state shared by all loops: the denoiser, options, step count, interruption.
class Run {
 public:
  Run(const DenoiseFn& fn, const SamplerOptions& opt, int total)
      : fn_(fn), opt_(opt), total_(total) {}

  Result<HostTensor> model(const HostTensor& x, float sigma) {
    if (opt_.interrupted && opt_.interrupted()) {
      return Status(ErrorCode::CANCELLED, "sampling interrupted");
    }
    HR_ASSIGN_OR_RETURN(HostTensor d, fn_(x, sigma));
    if (d.shape() != x.shape() || d.dtype() != DType::F32) {
      return make_error(ErrorCode::INTERNAL, "denoiser returned {} for input {}", d.desc().str(),
                        x.desc().str());
    }
    return d;
  }
  void report(int step, const HostTensor& x, const HostTensor& denoised) {
    if (opt_.callback) opt_.callback(step, total_, x, denoised);
  }
  Result<HostTensor> noise(const Shape& shape) {
    if (!opt_.noise) {
      return Status(ErrorCode::INVALID_ARGUMENT, "this sampler needs a noise generator");
    }
    return opt_.noise->draw(shape);
  }
  // ComfyUI's BrownianTreeNoiseSampler(x, sigmas[sigmas > 0].min(), sigmas.max(), seed).
  BrownianTreeNoiseSampler brownian(const Shape& shape, const std::vector<float>& s) const {
    float lo = 0.0f, hi = 0.0f;
    bool any = false;
    for (float v : s) {
      if (v > 0.0f && (!any || v < lo)) lo = v;
      if (v > 0.0f) any = true;
      hi = std::max(hi, v);
    }
    return BrownianTreeNoiseSampler(shape, lo, hi, opt_.seed);
  }
  const SamplerOptions& opt() const { return opt_; }
  // ComfyUI's isinstance(model_sampling, CONST): the samplers' flow forms (Note [flow samplers]).
  bool flow() const {
    return opt_.model_sampling && opt_.model_sampling->prediction() == SamplingPrediction::CONST;
  }

 private:
  const DenoiseFn& fn_;
  const SamplerOptions& opt_;
  int total_;
};

// Element-wise map over same-shaped tensors into a new tensor.
template <typename F>
HostTensor map1(const HostTensor& a, F f) {
  HostTensor o(a.desc());
  const float* pa = a.f32();
  float* po = o.f32();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = f(pa[i]);
  return o;
}
template <typename F>
HostTensor map2(const HostTensor& a, const HostTensor& b, F f) {
  HostTensor o(a.desc());
  const float *pa = a.f32(), *pb = b.f32();
  float* po = o.f32();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = f(pa[i], pb[i]);
  return o;
}
template <typename F>
HostTensor map3(const HostTensor& a, const HostTensor& b, const HostTensor& c, F f) {
  HostTensor o(a.desc());
  const float *pa = a.f32(), *pb = b.f32(), *pc = c.f32();
  float* po = o.f32();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = f(pa[i], pb[i], pc[i]);
  return o;
}

// to_d: (x - denoised) / sigma.
HostTensor to_d(const HostTensor& x, float sigma, const HostTensor& den) {
  return map2(x, den, [sigma](float a, float b) { return (a - b) / sigma; });
}

// torch.lerp(a, b, 0.5) for 0-dim float tensors (weight >= 0.5 branch).
float lerp_half(float a, float b) { return b - (b - a) * 0.5f; }

float neg_log(float s) { return -std::log(s); }
float exp_neg(float t) { return std::exp(-t); }

// Note [flow samplers]
// ComfyUI's k-diffusion samplers test the model sampling for CONST (rectified flow, x_t = sigma
// noise + (1 - sigma) x0) and then take another form: euler_ancestral, dpm_2_ancestral and
// dpmpp_2s_ancestral run their _RF variants (step down to sigma_down = sigma_next * (1 + (sigma_next
// / sigma - 1) eta), rescale by alpha_next / alpha_down and add renoise_coeff of noise), and the
// samplers written in half-logSNR lambda = log(alpha / sigma) (dpmpp_sde, dpmpp_2m_sde) use
// lambda = -logit(sigma) and sigma = sigmoid(-lambda) instead of -log(sigma) and exp(-lambda),
// after moving a first sigma >= 1 (lambda = -inf) to percent_to_sigma(1e-4)
// (offset_first_sigma_for_snr). euler, heun, dpm_2, lms, dpmpp_2m, ddpm, ddim and lcm have one
// form. The flow forms follow ComfyUI's float32 expression order as the others do; tests in
// tests/sampling/flux_sampling_test.cpp against tests/data/flux/sampling_golden.safetensors.

// sigma_to_half_log_snr / half_log_snr_to_sigma (k_diffusion/sampling.py).
float half_log_snr(float sigma, bool flow) {
  if (!flow) return neg_log(sigma);
  // torch.logit (no eps): log(x / (1 - x)), +inf at 1.
  const float logit = sigma == 1.0f ? INFINITY : std::log(sigma / (1.0f - sigma));
  return -logit;
}
float half_log_snr_sigma(float lambda, bool flow) {
  if (!flow) return exp_neg(lambda);
  return 1.0f / (1.0f + std::exp(lambda));  // sigmoid(-lambda)
}

// offset_first_sigma_for_snr: a flow schedule's first sigma >= 1 becomes percent_to_sigma(1e-4).
std::vector<float> snr_offset_first(const Run& run, std::vector<float> s) {
  if (s.size() <= 1 || !run.flow() || s[0] < 1.0f) return s;
  s[0] = run.opt().model_sampling->percent_to_sigma(1e-4);
  return s;
}

// The _RF samplers' step down from sigma to sigma_next (sample_euler_ancestral_RF and kin).
struct FlowDownStep {
  float down;     // sigma_down
  float rescale;  // alpha_ip1 / alpha_down
  float renoise;  // renoise_coeff
};
FlowDownStep flow_down_step(float sigma, float next, float eta) {
  const float ratio = 1.0f + (next / sigma - 1.0f) * eta;
  const float down = next * ratio;
  const float alpha_next = 1.0f - next, alpha_down = 1.0f - down;
  const float renoise = std::sqrt(next * next - down * down * (alpha_next * alpha_next) /
                                                    (alpha_down * alpha_down));
  return {down, alpha_next / alpha_down, renoise};
}

// x' = r x + (1 - r) d with r = to / from (the flow forms' Euler step).
HostTensor flow_lerp(const HostTensor& x, const HostTensor& d, float to, float from) {
  const float r = to / from, k = 1.0f - r;
  HostTensor o(x.desc());
  const float *px = x.f32(), *pd = d.f32();
  float* po = o.f32();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = r * px[i] + k * pd[i];
  return o;
}

// ---- first-order and Heun-type samplers ---------------------------------------------------

Result<HostTensor> sample_euler(Run& run, HostTensor x, const std::vector<float>& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    const float sigma = s[i], dt = s[i + 1] - s[i];
    x = map2(x, den, [&](float a, float b) { return a + ((a - b) / sigma) * dt; });
  }
  return x;
}

Result<HostTensor> sample_euler_ancestral(Run& run, HostTensor x, const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    const AncestralStep st = ancestral_step(s[i], s[i + 1], eta);
    run.report(int(i), x, den);
    if (st.down == 0.0f) {
      x = std::move(den);
      continue;
    }
    const float sigma = s[i], dt = st.down - s[i];
    HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
    x = map3(x, den, n, [&](float a, float b, float z) {
      return (a + ((a - b) / sigma) * dt) + (z * s_noise) * st.up;
    });
  }
  return x;
}

// sample_euler_ancestral_RF (Note [flow samplers]).
Result<HostTensor> sample_euler_ancestral_rf(Run& run, HostTensor x, const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    if (s[i + 1] == 0.0f) {
      x = std::move(den);
      continue;
    }
    const FlowDownStep st = flow_down_step(s[i], s[i + 1], eta);
    x = flow_lerp(x, den, st.down, s[i]);
    if (eta > 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      x = map2(x, n, [&](float a, float z) { return st.rescale * a + (z * s_noise) * st.renoise; });
    }
  }
  return x;
}

Result<HostTensor> sample_heun(Run& run, HostTensor x, const std::vector<float>& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i], next = s[i + 1], dt = next - sigma;
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    run.report(int(i), x, den);
    HostTensor d = to_d(x, sigma, den);
    if (next == 0.0f) {
      x = map2(x, d, [&](float a, float b) { return a + b * dt; });
      continue;
    }
    HostTensor x2 = map2(x, d, [&](float a, float b) { return a + b * dt; });
    HR_ASSIGN_OR_RETURN(HostTensor den2, run.model(x2, next));
    HostTensor d2 = to_d(x2, next, den2);
    x = map3(x, d, d2, [&](float a, float b, float c) { return a + ((b + c) / 2.0f) * dt; });
  }
  return x;
}

// DPM-Solver-2's second slope: the derivative at the log-midpoint between sigma and `down`,
// reached by an Euler step along d (dpm_2's inner step, and its ancestral forms').
Result<HostTensor> dpm_2_mid_slope(Run& run, const HostTensor& x, const HostTensor& d,
                                   float sigma, float down) {
  const float mid = std::exp(lerp_half(std::log(sigma), std::log(down)));
  const float dt1 = mid - sigma;
  HostTensor x2 = map2(x, d, [&](float a, float b) { return a + b * dt1; });
  HR_ASSIGN_OR_RETURN(HostTensor den2, run.model(x2, mid));
  return to_d(x2, mid, den2);
}

Result<HostTensor> sample_dpm_2(Run& run, HostTensor x, const std::vector<float>& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i], next = s[i + 1];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    run.report(int(i), x, den);
    HostTensor d = to_d(x, sigma, den);
    if (next == 0.0f) {
      const float dt = next - sigma;
      x = map2(x, d, [&](float a, float b) { return a + b * dt; });
      continue;
    }
    const float dt2 = next - sigma;
    HR_ASSIGN_OR_RETURN(HostTensor d2, dpm_2_mid_slope(run, x, d, sigma, next));
    x = map2(x, d2, [&](float a, float b) { return a + b * dt2; });
  }
  return x;
}

Result<HostTensor> sample_dpm_2_ancestral(Run& run, HostTensor x, const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    const AncestralStep st = ancestral_step(sigma, s[i + 1], eta);
    run.report(int(i), x, den);
    HostTensor d = to_d(x, sigma, den);
    if (st.down == 0.0f) {
      const float dt = st.down - sigma;
      x = map2(x, d, [&](float a, float b) { return a + b * dt; });
      continue;
    }
    const float dt2 = st.down - sigma;
    HR_ASSIGN_OR_RETURN(HostTensor d2, dpm_2_mid_slope(run, x, d, sigma, st.down));
    HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
    x = map3(x, d2, n,
             [&](float a, float b, float z) { return (a + b * dt2) + (z * s_noise) * st.up; });
  }
  return x;
}

// sample_dpm_2_ancestral_RF (Note [flow samplers]).
Result<HostTensor> sample_dpm_2_ancestral_rf(Run& run, HostTensor x, const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    const FlowDownStep st = flow_down_step(sigma, s[i + 1], eta);
    run.report(int(i), x, den);
    HostTensor d = to_d(x, sigma, den);
    if (st.down == 0.0f) {
      const float dt = st.down - sigma;
      x = map2(x, d, [&](float a, float b) { return a + b * dt; });
      continue;
    }
    const float dt2 = st.down - sigma;
    HR_ASSIGN_OR_RETURN(HostTensor d2, dpm_2_mid_slope(run, x, d, sigma, st.down));
    x = map2(x, d2, [&](float a, float b) { return a + b * dt2; });
    HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
    x = map2(x, n, [&](float a, float z) { return st.rescale * a + (z * s_noise) * st.renoise; });
  }
  return x;
}

// ---- linear multistep ---------------------------------------------------------------------

// Integral over [t[i], t[i+1]] of the Lagrange basis polynomial j on nodes t[i], ..., t[i-order+1]
// (k-diffusion linear_multistep_coeff integrates it with scipy quad; Gauss-Legendre with 4 nodes
// is exact for these polynomials of degree <= 3).
double lms_coeff(int order, const std::vector<float>& t, size_t i, int j) {
  auto fn = [&](double tau) {
    double prod = 1.0;
    for (int k = 0; k < order; ++k) {
      if (k == j) continue;
      prod *=
          (tau - double(t[i - size_t(k)])) / (double(t[i - size_t(j)]) - double(t[i - size_t(k)]));
    }
    return prod;
  };
  static const double kX[4] = {-0.8611363115940526, -0.3399810435848563, 0.3399810435848563,
                               0.8611363115940526};
  static const double kW[4] = {0.3478548451374538, 0.6521451548625461, 0.6521451548625461,
                               0.3478548451374538};
  const double a = t[i], b = t[i + 1];
  const double half = 0.5 * (b - a), mid = 0.5 * (a + b);
  double sum = 0.0;
  for (int q = 0; q < 4; ++q) sum += kW[q] * fn(mid + half * kX[q]);
  return sum * half;
}

Result<HostTensor> sample_lms(Run& run, HostTensor x, const std::vector<float>& s, int order = 4) {
  std::vector<HostTensor> ds;  // newest last
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    ds.push_back(to_d(x, s[i], den));
    if (int(ds.size()) > order) ds.erase(ds.begin());
    run.report(int(i), x, den);
    if (s[i + 1] == 0.0f) {
      x = std::move(den);
      continue;
    }
    const int cur = std::min(int(i) + 1, order);
    // sum(coeff * d for coeff, d in zip(coeffs, reversed(ds))), summed from 0 in that order.
    HostTensor acc(x.desc());
    for (int j = 0; j < cur; ++j) {
      const float c = float(lms_coeff(cur, s, i, j));
      const HostTensor& d = ds[ds.size() - 1 - size_t(j)];
      acc = map2(acc, d, [c](float a, float b) { return a + c * b; });
    }
    x = map2(x, acc, [](float a, float b) { return a + b; });
  }
  return x;
}

// ---- DPM-Solver++ family ------------------------------------------------------------------

Result<HostTensor> sample_dpmpp_2s_ancestral(Run& run, HostTensor x, const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    const AncestralStep st = ancestral_step(sigma, s[i + 1], eta);
    run.report(int(i), x, den);
    if (st.down == 0.0f) {
      const float dt = st.down - sigma;
      x = map2(x, den, [&](float a, float b) { return a + ((a - b) / sigma) * dt; });
    } else {
      const float t = neg_log(sigma), t_next = neg_log(st.down);
      const float h = t_next - t;
      const float sm = t + 0.5f * h;
      const float c1 = exp_neg(sm) / exp_neg(t), e1 = std::expm1(-h * 0.5f);
      HostTensor x2 = map2(x, den, [&](float a, float b) { return c1 * a - e1 * b; });
      HR_ASSIGN_OR_RETURN(HostTensor den2, run.model(x2, exp_neg(sm)));
      const float c2 = exp_neg(t_next) / exp_neg(t), e2 = std::expm1(-h);
      x = map2(x, den2, [&](float a, float b) { return c2 * a - e2 * b; });
    }
    if (s[i + 1] > 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      x = map2(x, n, [&](float a, float z) { return a + (z * s_noise) * st.up; });
    }
  }
  return x;
}

// sample_dpmpp_2s_ancestral_RF (Note [flow samplers]): the midpoint in lambda = log((1 - sigma) /
// sigma), or 0.9999 from sigma 1, where that lambda is -inf.
Result<HostTensor> sample_dpmpp_2s_ancestral_rf(Run& run, HostTensor x,
                                                const std::vector<float>& s) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  auto lambda_of = [](float sg) { return std::log((1.0f - sg) / sg); };
  auto sigma_of = [](float l) { return 1.0f / (std::exp(l) + 1.0f); };
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    const FlowDownStep st = flow_down_step(sigma, s[i + 1], eta);
    run.report(int(i), x, den);
    if (s[i + 1] == 0.0f) {
      const float dt = st.down - sigma;
      x = map2(x, den, [&](float a, float b) { return a + ((a - b) / sigma) * dt; });
    } else {
      float sigma_s = 0.9999f;
      if (sigma != 1.0f) {
        const float t_i = lambda_of(sigma), t_down = lambda_of(st.down);
        const float h = t_down - t_i;
        sigma_s = sigma_of(t_i + 0.5f * h);
      }
      HostTensor u = flow_lerp(x, den, sigma_s, sigma);
      HR_ASSIGN_OR_RETURN(HostTensor den2, run.model(u, sigma_s));
      x = flow_lerp(x, den2, st.down, sigma);
    }
    if (s[i + 1] > 0.0f && eta > 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      x = map2(x, n, [&](float a, float z) { return st.rescale * a + (z * s_noise) * st.renoise; });
    }
  }
  return x;
}

// Note [SDE noise]: ComfyUI's dpmpp_sde and dpmpp_2m_sde draw their noise from
// BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed=KSampler seed, cpu=True): one
// torchsde.BrownianTree over sigma (identity transform) in [smallest nonzero sigma, largest
// sigma], for the whole batch at once, and noise_sampler(sigma, sigma_next) =
// -tree(sigma_next, sigma) / sqrt(sigma - sigma_next). brownian_tree.h reproduces that tree
// (numpy SeedSequence seeds, torch CPU randn, the float32 bridge arithmetic), so with the same
// seed, sigmas and denoiser these two samplers follow ComfyUI's trajectory to float rounding:
// relative error ~1e-7, from randn's last bits (Note [torch cpu randn]); tests in
// tests/sampling/brownian_tree_test.cpp against tests/data/golden/sde. The tree is
// deterministic for a seed whatever the query order, and ComfyUI keeps it on the CPU even when
// the latent is on CUDA (cpu=True), so this noise does not depend on the device, unlike the
// ancestral samplers' NoiseGenerator. Not covered: a list of per-item seeds (ComfyUI's batched
// trees). For a flow model the tree spans the schedule as given, before its first sigma is
// offset (Note [flow samplers]), as in ComfyUI.
Result<HostTensor> sample_dpmpp_sde(Run& run, HostTensor x, const std::vector<float>& sigmas,
                                    float r = 0.5f) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  if (sigmas.size() <= 1) return x;
  BrownianTreeNoiseSampler brownian = run.brownian(x.shape(), sigmas);
  const bool flow = run.flow();
  const std::vector<float> s = snr_offset_first(run, sigmas);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    if (s[i + 1] == 0.0f) {
      x = std::move(den);
      continue;
    }
    const float ls = half_log_snr(s[i], flow), lt = half_log_snr(s[i + 1], flow);
    const float h = lt - ls;
    const float ls1 = ls + r * h;
    const float fac = 1.0f / (2.0f * r);
    const float sigma_s1 = half_log_snr_sigma(ls1, flow);
    const float alpha_s = s[i] * std::exp(ls);
    const float alpha_s1 = sigma_s1 * std::exp(ls1);
    const float alpha_t = s[i + 1] * std::exp(lt);
    // Step 1
    AncestralStep st = ancestral_step(exp_neg(ls), exp_neg(ls1), eta);
    float h_ = neg_log(st.down) - ls;
    float ca = (alpha_s1 / alpha_s) * std::exp(-h_), cb = alpha_s1 * std::expm1(-h_);
    HostTensor x2 = map2(x, den, [&](float a, float b) { return ca * a - cb * b; });
    if (eta > 0 && s_noise > 0) {
      HR_ASSIGN_OR_RETURN(HostTensor n, brownian.draw(s[i], sigma_s1));
      const float k = st.up;
      x2 = map2(x2, n, [&](float a, float z) { return a + ((alpha_s1 * z) * s_noise) * k; });
    }
    HR_ASSIGN_OR_RETURN(HostTensor den2, run.model(x2, sigma_s1));
    // Step 2
    st = ancestral_step(exp_neg(ls), exp_neg(lt), eta);
    h_ = neg_log(st.down) - ls;
    ca = (alpha_t / alpha_s) * std::exp(-h_);
    cb = alpha_t * std::expm1(-h_);
    x = map3(x, den, den2, [&](float a, float d1, float d2) {
      return ca * a - cb * ((1.0f - fac) * d1 + fac * d2);
    });
    if (eta > 0 && s_noise > 0) {
      HR_ASSIGN_OR_RETURN(HostTensor n, brownian.draw(s[i], s[i + 1]));
      const float k = st.up;
      x = map2(x, n, [&](float a, float z) { return a + ((alpha_t * z) * s_noise) * k; });
    }
  }
  return x;
}

Result<HostTensor> sample_dpmpp_2m(Run& run, HostTensor x, const std::vector<float>& s) {
  HostTensor old;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    const float t = neg_log(s[i]), t_next = neg_log(s[i + 1]);
    const float h = t_next - t;
    const float c = exp_neg(t_next) / exp_neg(t), e = std::expm1(-h);
    if (old.empty() || s[i + 1] == 0.0f) {
      x = map2(x, den, [&](float a, float b) { return c * a - e * b; });
    } else {
      const float h_last = t - neg_log(s[i - 1]);
      const float r = h_last / h;
      const float k = 1.0f / (2.0f * r);
      const float k1 = 1.0f + k;
      x = map3(x, den, old,
               [&](float a, float b, float o) { return c * a - e * (k1 * b - k * o); });
    }
    old = std::move(den);
  }
  return x;
}

Result<HostTensor> sample_dpmpp_2m_sde(Run& run, HostTensor x, const std::vector<float>& sigmas) {
  const float eta = float(run.opt().eta), s_noise = float(run.opt().s_noise);
  if (sigmas.size() <= 1) return x;
  BrownianTreeNoiseSampler brownian = run.brownian(x.shape(), sigmas);
  const bool flow = run.flow();
  const std::vector<float> s = snr_offset_first(run, sigmas);
  HostTensor old;
  float h_last = 0.0f;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    float h = 0.0f;
    if (s[i + 1] == 0.0f) {
      x = den.clone();
    } else {
      const float ls = half_log_snr(s[i], flow), lt = half_log_snr(s[i + 1], flow);
      h = lt - ls;
      const float h_eta = h * (eta + 1.0f);
      const float alpha_t = s[i + 1] * std::exp(lt);
      const float ca = s[i + 1] / s[i] * std::exp(-h * eta);
      const float cb = alpha_t * -std::expm1(-h_eta);
      x = map2(x, den, [&](float a, float b) { return ca * a + cb * b; });
      if (!old.empty()) {  // midpoint solver
        const float r = h_last / h;
        const float k = 0.5f * alpha_t * -std::expm1(-h_eta) * (1.0f / r);
        x = map3(x, den, old, [&](float a, float b, float o) { return a + k * (b - o); });
      }
      if (eta > 0 && s_noise > 0) {
        HR_ASSIGN_OR_RETURN(HostTensor n, brownian.draw(s[i], s[i + 1]));
        const float sq = std::sqrt(-std::expm1(-2.0f * h * eta)), next = s[i + 1];
        x = map2(x, n, [&](float a, float z) { return a + ((z * next) * sq) * s_noise; });
      }
    }
    old = std::move(den);
    h_last = h;
  }
  return x;
}

// ---- DDPM and LCM -------------------------------------------------------------------------

Result<HostTensor> sample_ddpm(Run& run, HostTensor x, const std::vector<float>& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i], prev = s[i + 1];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    run.report(int(i), x, den);
    const float in_scale = std::sqrt(1.0f + sigma * sigma);
    const float acp = 1.0f / (sigma * sigma + 1.0f);
    const float acp_prev = 1.0f / (prev * prev + 1.0f);
    const float alpha = acp / acp_prev;
    const float c_mu = std::sqrt(1.0f / alpha);
    const float c_eps = (1.0f - alpha) / std::sqrt(1.0f - acp);
    const float out_scale = prev != 0.0f ? std::sqrt(1.0f + prev * prev) : 1.0f;
    HostTensor mu = map2(x, den, [&](float a, float b) {
      const float eps = (a - b) / sigma;
      return c_mu * (a / in_scale - c_eps * eps);
    });
    if (prev > 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      const float c_n = std::sqrt((1.0f - alpha) * (1.0f - acp_prev) / (1.0f - acp));
      mu = map2(mu, n, [&](float a, float z) { return a + c_n * z; });
    }
    x = map1(mu, [&](float a) { return a * out_scale; });
  }
  return x;
}

Result<HostTensor> sample_lcm(Run& run, HostTensor x, const std::vector<float>& s) {
  const float s_noise = float(run.opt().s_noise);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, s[i]));
    run.report(int(i), x, den);
    x = std::move(den);
    if (s[i + 1] > 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      // model_sampling.noise_scaling(sigma_next, noise, x) without max_denoise.
      HostTensor scaled = map1(n, [&](float z) { return z * s_noise; });
      x = run.opt().model_sampling->noise_scaling(s[i + 1], scaled, x, false);
    }
  }
  return x;
}

// ---- RES multistep ------------------------------------------------------------------------

// torch.nan_to_num(v, nan=0.0): NaN -> 0, +-inf -> +-FLT_MAX.
float nan_to_num(float v) {
  if (std::isnan(v)) return 0.0f;
  if (std::isinf(v)) return std::copysign(std::numeric_limits<float>::max(), v);
  return v;
}

// Note [res_multistep]
// ComfyUI's res_multistep (the second-order multistep RES solver of arXiv 2308.02157, k_diffusion
// sampling.py): every step first takes get_ancestral_step(sigma, sigma_next, eta) (eta 0 for
// res_multistep, the sampler's eta for res_multistep_ancestral); the first step and any step to
// sigma_down 0 are Euler steps to sigma_down, the others
//   x = e^-h x + h (b1 denoised + b2 old_denoised)
// in t = -log(sigma), with h = t(sigma_down) - t(sigma), c2 = (t(sigma_prev) -
// t(old_sigma_down)) / h, phi1(z) = expm1(z) / z, phi2(z) = (phi1(z) - 1) / z at z = -h,
// b1 = nan_to_num(phi1 - phi2 / c2) and b2 = nan_to_num(phi2 / c2); then, when sigma_next > 0,
// noise * s_noise * sigma_up is added.
// At ComfyUI a125cd84 it has one form: CONST model sampling takes the same get_ancestral_step as
// the others (no _RF variant), so a flow model's ancestral steps use the variance-exploding
// split too. Scalars are float32 0-dim tensors as elsewhere; tests in
// tests/sampling/zimage_sampling_test.cpp against tests/data/zimage/sampling_golden.safetensors.
Result<HostTensor> sample_res_multistep(Run& run, HostTensor x, const std::vector<float>& s,
                                        float eta) {
  const float s_noise = float(run.opt().s_noise);
  HostTensor old;
  float old_down = 0.0f;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const float sigma = s[i];
    HR_ASSIGN_OR_RETURN(HostTensor den, run.model(x, sigma));
    const AncestralStep st = ancestral_step(sigma, s[i + 1], eta);
    run.report(int(i), x, den);
    if (st.down == 0.0f || old.empty()) {  // Euler
      const float dt = st.down - sigma;
      x = map2(x, den, [&](float a, float b) { return a + ((a - b) / sigma) * dt; });
    } else {
      const float t = neg_log(sigma), t_old = neg_log(old_down), t_next = neg_log(st.down),
                  t_prev = neg_log(s[i - 1]);
      const float h = t_next - t;
      const float c2 = (t_prev - t_old) / h;
      const float z = -h;
      const float phi1 = std::expm1(z) / z;
      const float phi2 = (phi1 - 1.0f) / z;
      const float b1 = nan_to_num(phi1 - phi2 / c2), b2 = nan_to_num(phi2 / c2);
      const float decay = exp_neg(h);
      x = map3(x, den, old,
               [&](float a, float d, float o) { return decay * a + h * (b1 * d + b2 * o); });
    }
    // ComfyUI draws noise here for eta 0 as well and scales it by sigma_up = 0: x is unchanged.
    if (s[i + 1] > 0.0f && eta != 0.0f) {
      HR_ASSIGN_OR_RETURN(HostTensor n, run.noise(x.shape()));
      x = map2(x, n, [&](float a, float zn) { return a + (zn * s_noise) * st.up; });
    }
    old = std::move(den);
    old_down = st.down;
  }
  return x;
}

}  // namespace

// ComfyUI's k-diffusion samplers that test for CONST model sampling and then take another path
// (sample_*_RF, or sigma <-> half-logSNR through the logit): Note [flow samplers].
bool sampler_branches_on_flow(std::string_view name) {
  return name == "euler_ancestral" || name == "dpm_2_ancestral" ||
         name == "dpmpp_2s_ancestral" || name == "dpmpp_sde" || name == "dpmpp_2m_sde";
}

AncestralStep ancestral_step(float sigma_from, float sigma_to, float eta) {
  if (eta == 0.0f) return {sigma_to, 0.0f};
  const float to2 = sigma_to * sigma_to, from2 = sigma_from * sigma_from;
  const float up = std::min(sigma_to, eta * std::sqrt(to2 * (from2 - to2) / from2));
  const float down = std::sqrt(to2 - up * up);
  return {down, up};
}

const std::vector<std::string>& sampler_names() { return kSamplerNames; }

bool sampler_is_implemented(std::string_view name) {
  return std::find(kSamplerNames.begin(), kSamplerNames.end(), name) != kSamplerNames.end();
}

bool sampler_needs_noise(std::string_view name) {
  return name == "euler_ancestral" || name == "dpm_2_ancestral" || name == "dpmpp_2s_ancestral" ||
         name == "ddpm" || name == "lcm" || name == "res_multistep_ancestral";
}

Result<HostTensor> sampler_run(std::string_view name, const DenoiseFn& denoise, HostTensor x,
                               const std::vector<float>& sigmas, const SamplerOptions& options) {
  if (x.dtype() != DType::F32) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "sampler latent must be f32, got {}",
                      x.desc().str());
  }
  if (name == "lcm" && !options.model_sampling)
    return Status(ErrorCode::INVALID_ARGUMENT, "lcm needs SamplerOptions::model_sampling");
  Run run(denoise, options, sigmas.empty() ? 0 : int(sigmas.size()) - 1);
  const bool flow = run.flow();  // Note [flow samplers]
  if (name == "euler" || name == "ddim") return sample_euler(run, std::move(x), sigmas);
  if (name == "euler_ancestral")
    return flow ? sample_euler_ancestral_rf(run, std::move(x), sigmas)
                : sample_euler_ancestral(run, std::move(x), sigmas);
  if (name == "heun") return sample_heun(run, std::move(x), sigmas);
  if (name == "dpm_2") return sample_dpm_2(run, std::move(x), sigmas);
  if (name == "dpm_2_ancestral")
    return flow ? sample_dpm_2_ancestral_rf(run, std::move(x), sigmas)
                : sample_dpm_2_ancestral(run, std::move(x), sigmas);
  if (name == "lms") return sample_lms(run, std::move(x), sigmas);
  if (name == "dpmpp_2s_ancestral")
    return flow ? sample_dpmpp_2s_ancestral_rf(run, std::move(x), sigmas)
                : sample_dpmpp_2s_ancestral(run, std::move(x), sigmas);
  if (name == "dpmpp_sde") return sample_dpmpp_sde(run, std::move(x), sigmas);
  if (name == "dpmpp_2m") return sample_dpmpp_2m(run, std::move(x), sigmas);
  if (name == "dpmpp_2m_sde") return sample_dpmpp_2m_sde(run, std::move(x), sigmas);
  if (name == "ddpm") return sample_ddpm(run, std::move(x), sigmas);
  if (name == "lcm") return sample_lcm(run, std::move(x), sigmas);
  if (name == "res_multistep") return sample_res_multistep(run, std::move(x), sigmas, 0.0f);
  if (name == "res_multistep_ancestral")
    return sample_res_multistep(run, std::move(x), sigmas, float(options.eta));
  return make_error(ErrorCode::UNSUPPORTED, "sampler '{}' is not implemented", name);
}

}  // namespace hr
