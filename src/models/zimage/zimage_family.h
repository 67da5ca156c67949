// The Z-Image family (Turbo and Base): its registry entry.
#pragma once

#include <vector>

#include "models/family.h"

namespace hr {

// The text-encoder kind of Z-Image (TextEncoderPart::kind): Qwen3-4B, ComfyUI's "qwen3_4b".
inline constexpr const char* kZImageQwen3 = "qwen3_4b";
// Where a single-file Z-Image checkpoint keeps it (supported_models.py ZImage.clip_target:
// text_encoder_key_prefix "text_encoders." + "qwen3_4b.transformer.").
inline constexpr const char* kZImageQwen3Prefix = "text_encoders.qwen3_4b.transformer.";

// The one family "zimage" (Note [z-image detection] in zimage_family.cpp).
const std::vector<const ModelFamily*>& zimage_families();

}  // namespace hr
