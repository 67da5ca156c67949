// CFG combination and the CFG denoiser built from a raw model callback.
#include "sampling/cfg.h"

#include <cmath>
#include <cstring>

namespace hr {

bool cfg_skips_uncond(float cfg) {
  // math.isclose(cfg, 1.0): rel_tol 1e-9, abs_tol 0
  return std::fabs(double(cfg) - 1.0) <= 1e-9 * std::max(std::fabs(double(cfg)), 1.0);
}

HostTensor cfg_combine(const HostTensor& cond, const HostTensor& uncond, float scale) {
  HostTensor out(cond.desc());
  const float *c = cond.f32(), *u = uncond.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < cond.numel(); ++i) o[i] = u[i] + (c[i] - u[i]) * scale;
  return out;
}

namespace {

Status check_output(const HostTensor& out, const Shape& want) {
  if (out.dtype() != DType::F32 || out.shape() != want) {
    return make_error(ErrorCode::INTERNAL, "model returned {}, expected f32{}", out.desc().str(),
                      want.str());
  }
  return Status::ok_status();
}

}  // namespace

DenoiseFn cfg_denoiser(const ModelSampling& ms, ModelFn cond, ModelFn uncond, float cfg) {
  return [&ms, cond = std::move(cond), uncond = std::move(uncond), cfg](
             const HostTensor& x, float sigma) -> Result<HostTensor> {
    HostTensor x_in = ms.calculate_input(x, sigma);
    const float t = ms.timestep(sigma);
    HR_ASSIGN_OR_RETURN(HostTensor out_c, cond(x_in, t));
    HR_TRY(check_output(out_c, x.shape()));
    HostTensor den_c = ms.calculate_denoised(sigma, out_c, x);
    if (cfg_skips_uncond(cfg)) return den_c;
    HR_ASSIGN_OR_RETURN(HostTensor out_u, uncond(x_in, t));
    HR_TRY(check_output(out_u, x.shape()));
    HostTensor den_u = ms.calculate_denoised(sigma, out_u, x);
    return cfg_combine(den_c, den_u, cfg);
  };
}

DenoiseFn cfg_denoiser_batched(const ModelSampling& ms, ModelFn cond_then_uncond,
                               float cfg) {
  return [&ms, fn = std::move(cond_then_uncond), cfg](const HostTensor& x,
                                                      float sigma) -> Result<HostTensor> {
    HostTensor x_in = ms.calculate_input(x, sigma);
    const float t = ms.timestep(sigma);
    if (cfg_skips_uncond(cfg)) {
      HR_ASSIGN_OR_RETURN(HostTensor out, fn(x_in, t));
      HR_TRY(check_output(out, x.shape()));
      return ms.calculate_denoised(sigma, out, x);
    }
    Shape two = x.shape();
    two[0] *= 2;
    HostTensor batch(DType::F32, two);
    std::memcpy(batch.f32(), x_in.f32(), x_in.bytes());
    std::memcpy(batch.f32() + x_in.numel(), x_in.f32(), x_in.bytes());
    HR_ASSIGN_OR_RETURN(HostTensor out, fn(batch, t));
    HR_TRY(check_output(out, two));
    HostTensor out_c(x.desc()), out_u(x.desc());
    std::memcpy(out_c.f32(), out.f32(), out_c.bytes());
    std::memcpy(out_u.f32(), out.f32() + x.numel(), out_u.bytes());
    return cfg_combine(ms.calculate_denoised(sigma, out_c, x),
                       ms.calculate_denoised(sigma, out_u, x), cfg);
  };
}

}  // namespace hr
