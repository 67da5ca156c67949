// Classifier-free guidance on denoised values (ComfyUI cfg_function) and the denoiser a
// sampler calls, built from a raw model callback (ComfyUI CFGGuider + BaseModel.apply_model).
#pragma once

#include <functional>

#include "core/status.h"
#include "core/tensor.h"
#include "sampling/model_sampling.h"
#include "sampling/samplers.h"

namespace hr {

// uncond + (cond - uncond) * scale, element-wise in float32.
HostTensor cfg_combine(const HostTensor& cond, const HostTensor& uncond, float scale);

// The network as the sampler sees it: the scaled input x_in = x / sqrt(sigma^2 + 1) and the
// timestep (ModelSampling::timestep) -> raw output (eps or v), same
// shape as x_in. The conditioning is bound inside the callback.
using ModelFn = std::function<Result<HostTensor>(const HostTensor& x_in, float timestep)>;

// Denoiser for a sampler: calls `cond` and (unless cfg is close to 1, where ComfyUI skips it)
// `uncond` on the same x_in and timestep, converts each output to a denoised value and
// combines them with cfg_combine.
DenoiseFn cfg_denoiser(const ModelSampling& ms, ModelFn cond, ModelFn uncond, float cfg);

// As cfg_denoiser with one model call on the batch concat(x_in, x_in) along dim 0: rows of the
// first half belong to the positive conditioning, the second half to the negative one (bind a
// context batched the same way). With cfg close to 1 the batch is x_in alone (positive only).
DenoiseFn cfg_denoiser_batched(const ModelSampling& ms, ModelFn cond_then_uncond,
                               float cfg);

// True when ComfyUI skips the negative pass (math.isclose(cfg, 1.0)).
bool cfg_skips_uncond(float cfg);

}  // namespace hr
