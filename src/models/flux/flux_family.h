// The Flux.1 families (dev, schnell): their registry entries.
#pragma once

#include <vector>

#include "models/family.h"

namespace hr {

// Text-encoder kinds of a Flux checkpoint (ComfyUI's flux_clip submodules).
inline constexpr const char* kFluxClipL = "clip_l";  // CLIP-L, its pooled output -> y
inline constexpr const char* kFluxT5XXL = "t5xxl";   // T5-XXL, its tokens -> txt

// flux (dev, guidance-distilled) then flux-schnell (Note [flux variants] in flux_family.cpp).
const std::vector<const ModelFamily*>& flux_families();

}  // namespace hr
