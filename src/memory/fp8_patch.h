// Patching a weight stored in fp8 as ComfyUI does: in float32, rounded back to fp8
// stochastically with the weight's key as seed (Note [fp8 patches]).
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "memory/weight_patch.h"

namespace hr {

// `stored` (F8_E4M3 or F8_E5M2) patched by `patches`; `scale` (f32 {1}) is its scaled-fp8
// scale or null. `comfy_key` is ComfyUI's model key of the weight (the rounding's seed).
Result<HostTensor> fp8_patched_host(const HostTensor& stored, const HostTensor* scale,
                                    std::span<const WeightPatch> patches,
                                    const std::string& comfy_key);

}  // namespace hr
