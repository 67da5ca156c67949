// The Flux.1 families' LoRA key map (Note [lora key maps]): the stems ComfyUI's
// model_lora_keys_unet gives a Flux model, in headroom's names (Note [flux lora keys]).
#pragma once

#include "models/lora_keys.h"

namespace hr {

// ModelFamily::lora_keys of the Flux families. `diffusion` must be a FluxModel
// (INVALID_ARGUMENT otherwise); `text` is mapped by its stores' ComfyUI keys (CLIP-L, T5-XXL).
Result<LoraKeyMap> flux_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text);

}  // namespace hr
