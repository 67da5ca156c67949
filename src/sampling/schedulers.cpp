// ComfyUI schedulers. Tensor arithmetic that ComfyUI does in float32 (torch.linspace, karras,
// exponential, kl_optimal) is done in float here too, in the same order; Python-float
// arithmetic (linear_quadratic, beta) in double.
#include "sampling/schedulers.h"

#include <algorithm>
#include <cmath>

namespace hr {

namespace {

// torch.linspace for float32 (CPU scalar path): the first half counts up from start, the
// second half down from end.
std::vector<float> linspace_f32(float start, float end, int steps) {
  std::vector<float> out(size_t(std::max(steps, 0)));
  if (steps <= 0) return out;
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / float(steps - 1);
  const int half = steps / 2;
  for (int i = 0; i < steps; ++i) {
    out[size_t(i)] = i < half ? start + step * float(i) : end - step * float(steps - i - 1);
  }
  return out;
}

std::vector<float> simple_scheduler(const ModelSampling& ms, int steps) {
  const auto& s = ms.sigmas();
  const double ss = double(s.size()) / double(steps);
  std::vector<float> out;
  for (int x = 0; x < steps; ++x) {
    out.push_back(s[s.size() - 1 - size_t(int64_t(double(x) * ss))]);
  }
  out.push_back(0.0f);
  return out;
}

std::vector<float> ddim_scheduler(const ModelSampling& ms, int steps) {
  const auto& s = ms.sigmas();
  std::vector<float> sigs;
  size_t x = 1;
  bool zero = true;
  if (std::fabs(s[x]) <= 1e-5) {
    steps += 1;
    zero = false;
  }
  const size_t ss = std::max<size_t>(s.size() / size_t(steps), 1);
  for (; x < s.size(); x += ss) sigs.push_back(s[x]);
  std::reverse(sigs.begin(), sigs.end());
  if (zero) sigs.push_back(0.0f);
  return sigs;
}

std::vector<float> normal_scheduler(const ModelSampling& ms, int steps, bool sgm) {
  const float start = ms.timestep(ms.sigma_max());
  const float end = ms.timestep(ms.sigma_min());
  bool append_zero = true;
  std::vector<float> ts;
  if (sgm) {
    ts = linspace_f32(start, end, steps + 1);
    ts.pop_back();
  } else {
    if (std::fabs(ms.sigma(end)) <= 1e-5) {
      steps += 1;
      append_zero = false;
    }
    ts = linspace_f32(start, end, steps);
  }
  std::vector<float> out;
  for (float t : ts) out.push_back(ms.sigma(t));
  if (append_zero) out.push_back(0.0f);
  return out;
}

std::vector<float> beta_scheduler(const ModelSampling& ms, int steps, double alpha = 0.6,
                                  double beta = 0.6) {
  const auto& s = ms.sigmas();
  const double total = double(s.size() - 1);
  std::vector<float> out;
  double last_t = -1.0;
  for (int i = 0; i < steps; ++i) {
    const double p = 1.0 - double(i) * (1.0 / double(steps));
    const double t = std::nearbyint(beta_ppf(p, alpha, beta) * total);  // numpy.rint: half-even
    if (t != last_t) out.push_back(s[size_t(t)]);
    last_t = t;
  }
  out.push_back(0.0f);
  return out;
}

std::vector<float> linear_quadratic_schedule(const ModelSampling& ms, int steps,
                                             double threshold_noise = 0.025) {
  std::vector<double> sched;
  if (steps == 1) {
    sched = {1.0, 0.0};
  } else {
    const int linear_steps = steps / 2;
    for (int i = 0; i < linear_steps; ++i) sched.push_back(i * threshold_noise / linear_steps);
    const double diff = linear_steps - threshold_noise * steps;
    const int quadratic_steps = steps - linear_steps;
    const double qcoef = diff / (double(linear_steps) * double(quadratic_steps) * quadratic_steps);
    const double lcoef =
        threshold_noise / linear_steps - 2 * diff / (double(quadratic_steps) * quadratic_steps);
    const double cst = qcoef * (double(linear_steps) * linear_steps);
    for (int i = linear_steps; i < steps; ++i) {
      sched.push_back(qcoef * (double(i) * i) + lcoef * i + cst);
    }
    sched.push_back(1.0);
    for (double& v : sched) v = 1.0 - v;
  }
  std::vector<float> out;
  for (double v : sched) out.push_back(float(v) * ms.sigma_max());
  return out;
}

// Regularized incomplete beta I_x(a, b) by the continued fraction (modified Lentz).
double beta_cf(double x, double a, double b) {
  constexpr double kTiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-16) break;
  }
  return h;
}

double beta_inc(double x, double a, double b) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double lbt =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1.0) / (a + b + 2.0)) return std::exp(lbt) * beta_cf(x, a, b) / a;
  return 1.0 - std::exp(lbt) * beta_cf(1.0 - x, b, a) / b;
}

}  // namespace

double beta_ppf(double p, double alpha, double beta) {
  if (p <= 0.0) return 0.0;
  if (p >= 1.0) return 1.0;
  if (alpha == beta) {
    // Symmetric: solve on the lower half so ppf(p) + ppf(1 - p) == 1 and ppf(0.5) == 0.5 exactly
    // (beta's rint(ppf * 999) depends on 0.5 * 999 rounding to the even 500, as in scipy).
    if (p == 0.5) return 0.5;
    if (p > 0.5) return 1.0 - beta_ppf(1.0 - p, alpha, beta);
  }
  // The CDF is monotone on [0, 1]; bisection to the last representable bit.
  double lo = 0.0, hi = 1.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (beta_inc(mid, alpha, beta) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

std::vector<float> sigmas_karras(int n, double sigma_min, double sigma_max, double rho) {
  const std::vector<float> ramp = linspace_f32(0.0f, 1.0f, n);
  const double min_inv = std::pow(sigma_min, 1.0 / rho);
  const double max_inv = std::pow(sigma_max, 1.0 / rho);
  const float diff = float(min_inv - max_inv);
  std::vector<float> out;
  for (float r : ramp) out.push_back(std::pow(float(max_inv) + r * diff, float(rho)));
  out.push_back(0.0f);
  return out;
}

std::vector<float> sigmas_exponential(int n, double sigma_min, double sigma_max) {
  std::vector<float> out = linspace_f32(float(std::log(sigma_max)), float(std::log(sigma_min)), n);
  for (float& v : out) v = std::exp(v);
  out.push_back(0.0f);
  return out;
}

std::vector<float> sigmas_kl_optimal(int n, double sigma_min, double sigma_max) {
  const float amin = float(std::atan(sigma_min)), amax = float(std::atan(sigma_max));
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    const float adj = float(i) / float(n - 1);
    out.push_back(std::tan(adj * amin + (1.0f - adj) * amax));
  }
  out.push_back(0.0f);
  return out;
}

const std::vector<std::string>& scheduler_names() {
  static const std::vector<std::string> kNames = {"simple",      "sgm_uniform",      "karras",
                                                  "exponential", "ddim_uniform",     "beta",
                                                  "normal",      "linear_quadratic", "kl_optimal"};
  return kNames;
}

Result<std::vector<float>> calculate_sigmas(const ModelSampling& ms,
                                            std::string_view scheduler, int steps) {
  if (steps < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "steps must be >= 1, got {}", steps);
  const double smin = ms.sigma_min(), smax = ms.sigma_max();
  if (scheduler == "simple") return simple_scheduler(ms, steps);
  if (scheduler == "sgm_uniform") return normal_scheduler(ms, steps, true);
  if (scheduler == "karras") return sigmas_karras(steps, smin, smax);
  if (scheduler == "exponential") return sigmas_exponential(steps, smin, smax);
  if (scheduler == "ddim_uniform") return ddim_scheduler(ms, steps);
  if (scheduler == "beta") return beta_scheduler(ms, steps);
  if (scheduler == "normal") return normal_scheduler(ms, steps, false);
  if (scheduler == "linear_quadratic") return linear_quadratic_schedule(ms, steps);
  if (scheduler == "kl_optimal") return sigmas_kl_optimal(steps, smin, smax);
  return make_error(ErrorCode::INVALID_ARGUMENT, "unknown scheduler '{}'", scheduler);
}

bool sampler_discards_penultimate_sigma(std::string_view sampler) {
  return sampler == "dpm_2" || sampler == "dpm_2_ancestral" || sampler == "uni_pc" ||
         sampler == "uni_pc_bh2";
}

namespace {

Result<std::vector<float>> ksampler_calculate(const ModelSampling& ms,
                                              std::string_view scheduler, std::string_view sampler,
                                              int steps) {
  const bool discard = sampler_discards_penultimate_sigma(sampler);
  if (discard) steps += 1;
  HR_ASSIGN_OR_RETURN(std::vector<float> s, calculate_sigmas(ms, scheduler, steps));
  if (discard && s.size() >= 2) s.erase(s.end() - 2);
  return s;
}

}  // namespace

Result<std::vector<float>> ksampler_sigmas(const ModelSampling& ms,
                                           std::string_view scheduler, std::string_view sampler,
                                           int steps, double denoise, int start_step, int last_step,
                                           bool force_full_denoise) {
  std::vector<float> sigmas;
  if (denoise > 0.9999) {
    HR_ASSIGN_OR_RETURN(sigmas, ksampler_calculate(ms, scheduler, sampler, steps));
  } else if (denoise > 0.0) {
    const int new_steps = int(double(steps) / denoise);
    HR_ASSIGN_OR_RETURN(std::vector<float> all,
                        ksampler_calculate(ms, scheduler, sampler, new_steps));
    const size_t keep = std::min(all.size(), size_t(steps) + 1);
    sigmas.assign(all.end() - ptrdiff_t(keep), all.end());
  }
  if (last_step >= 0 && size_t(last_step) + 1 < sigmas.size()) {
    sigmas.resize(size_t(last_step) + 1);
    if (force_full_denoise) sigmas.back() = 0.0f;
  }
  if (start_step >= 0) {
    if (size_t(start_step) + 1 < sigmas.size()) {
      sigmas.erase(sigmas.begin(), sigmas.begin() + start_step);
    } else {
      sigmas.clear();  // ComfyUI returns the latent unchanged
    }
  }
  return sigmas;
}

}  // namespace hr
