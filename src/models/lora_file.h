// Reading a LoRA file: its keys matched to a model's weights through the family's key map
// (models/lora_keys.h) and turned into weight patches (memory/weight_patch.h), ComfyUI's
// load_lora with its adapters (LoRA/LoCon, LoHa, LoKr, DoRA, full diffs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "memory/weight_patch.h"
#include "models/lora_keys.h"
#include "models/safetensors.h"

namespace hr {

// One LoRA file's patches per component of the model it was matched against.
struct LoraPatches {
  std::map<std::string, std::vector<WeightPatch>> diffusion;  // by weight name
  std::vector<std::map<std::string, std::vector<WeightPatch>>> encoders;  // by encoder index
  std::vector<std::string> not_loaded;  // the file's keys no target took (ComfyUI's warning)
  size_t targets = 0;                   // weights patched
  uint64_t factor_bytes = 0;
};

struct LoraStrengths {
  float model = 1.0f;
  float clip = 1.0f;
};

// The patches of `file` for the targets `map` names, with the strengths (a 0 strength
// component gets none). Errors name the file and the key: a factor of a shape its kind cannot
// use, a tensor that does not read. Keys that match nothing are listed, not errors.
Result<LoraPatches> lora_patches_read(const SafetensorsFile& file, const LoraKeyMap& map,
                                      const LoraStrengths& strengths);

}  // namespace hr
