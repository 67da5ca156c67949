// LoRA key maps: which tensor of which component of a loaded model a LoRA file's key stem
// patches (Note [lora key maps]).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/status.h"

namespace hr {

class DiffusionModel;
class TextEncoder;

// Note [lora key maps]
// A LoRA file names the layers it patches in one of several dialects (kohya "lora_unet_..." /
// "lora_te1_...", diffusers/PEFT "unet.down_blocks...processor.to_q", ComfyUI's generic
// "diffusion_model.<tensor>" and "text_encoders.<tensor>", LyCORIS, ...). A key map (ComfyUI's
// model_lora_keys_unet + model_lora_keys_clip) takes every stem those dialects use for a loaded
// model to the tensor it patches, in headroom's own names: the component, the encoder within
// the text-encoder component, the weight's name in that component's WeightSet, and, where
// headroom keeps several of the reference's tensors in one (OpenCLIP's fused in_proj_weight
// holds HF q/k/v), the rows of the fused tensor. A stem is a LoRA key without its suffix
// (".lora_up.weight", ".lora_A.weight", ".alpha", ".hada_w1_a", ".diff", ...): the loader strips
// the suffix, looks the stem up here and reports the stems that are not in the map.
//
// The map is built from the loaded model (its weight names and its configuration), never from
// a fixed list, so a checkpoint with another depth or block layout gets the right stems and no
// stem points at a tensor the model does not have.
//
// A family declares its map in the registry (ModelFamily::lora_keys). A family (Flux:
// flux_lora_keys, Z-Image: zimage_lora_keys, as templates) adds a function of this type that
// reads its own weight names and applies a table of its stem patterns: for each of its weights
// the dialects' names (diffusers "transformer.X", kohya "lora_unet_" + X with '.' -> '_', the
// generic "diffusion_model.X"), plus a row slice where the family fuses tensors that LoRA
// trainers keep apart. Nothing outside the family's
// folder changes; the LoRA loader and the patcher only read the map.
enum class LoraComponent : uint8_t { DIFFUSION, TEXT_ENCODER };

struct LoraTarget {
  LoraComponent component = LoraComponent::DIFFUSION;
  int encoder = 0;          // TEXT_ENCODER: index into the text-encoder component's encoders
  std::string weight;       // tensor name in that component's weight store (prefix stripped)
  int64_t row_offset = -1;  // >= 0: rows [row_offset, row_offset + rows) of a fused tensor
  int64_t rows = 0;
  bool operator==(const LoraTarget&) const = default;
};

// stem (a LoRA key without its ".lora_up.weight"/".alpha"/... suffix) -> target
using LoraKeyMap = std::unordered_map<std::string, LoraTarget>;

// A family's key map for the components present (either may be null: LoraLoaderModelOnly has
// no text encoder, a CLIP-only file no diffusion model).
using LoraKeysFn = Result<LoraKeyMap> (*)(const DiffusionModel* diffusion,
                                         const TextEncoder* text);

}  // namespace hr
