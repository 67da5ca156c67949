// The Z-Image family's LoRA key map (Note [lora key maps]): the stems newer ComfyUI's
// model_lora_keys_unet gives a Lumina2 / Z-Image model, in headroom's names
// (Note [zimage lora keys]).
#pragma once

#include "models/lora_keys.h"

namespace hr {

// ModelFamily::lora_keys of Z-Image. `diffusion` must be a ZImageModel (INVALID_ARGUMENT
// otherwise); `text` (Qwen3) gets the generic "text_encoders." stems.
Result<LoraKeyMap> zimage_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text);

}  // namespace hr
