// The SD families' LoRA key map (Note [lora key maps]): the stems ComfyUI's model_lora_keys_unet
// and model_lora_keys_clip give an SD1 / SD2 / SDXL / SDXL-refiner model, in headroom's names.
#pragma once

#include "models/lora_keys.h"

namespace hr {

// ModelFamily::lora_keys of the SD families. `diffusion` must be an SDUNet and `text` an
// SDTextEncoder (INVALID_ARGUMENT otherwise); either may be null.
Result<LoraKeyMap> sd_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text);

}  // namespace hr
