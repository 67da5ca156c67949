// The pieces every family's LoRA key map (Note [lora key maps] in lora_keys.h) is built from:
// kohya's underscore form of a dotted name, a diffusion-model target, ComfyUI's generic and
// kohya stems for every tensor of a store, and a diffusers name with its (sliced) target.
#pragma once

#include <cstdint>
#include <string>

#include "memory/weight_set.h"
#include "models/lora_keys.h"

namespace hr {

// One diffusers module name (without ".weight") and the tensor it patches in headroom's store,
// with a row slice where the family fuses what diffusers keeps apart (row_offset -1: whole).
struct LoraDiffusersName {
  std::string diffusers;
  std::string weight;
  int64_t row_offset = -1;
  int64_t rows = 0;
};

// "a.b.c" -> "a_b_c" (kohya's stems).
std::string lora_underscored(std::string dotted);

// The diffusion model's tensor `weight`, whole or rows [row_offset, row_offset + rows).
LoraTarget lora_diffusion_target(std::string weight, int64_t row_offset = -1, int64_t rows = 0);

// ComfyUI's model_lora_keys_unet stems every diffusion model gets: for each weight "X.weight"
// of `store`, "diffusion_model.X" and kohya's "lora_unet_X" (dots as underscores); a tensor
// other than a weight (a bias) keeps its suffix, "diffusion_model.X.bias".
void lora_generic_diffusion_keys(LoraKeyMap& map, const WeightSet& store);

}  // namespace hr
