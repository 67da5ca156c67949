// What a text-encoder file (ComfyUI's text_encoders/ folder) holds: CLIP-L/H/G or T5 encoders
// told apart by their keys, as comfy/sd.py detect_te_model tells them apart, for the loaders that
// take several such files (DualCLIPLoader).
#pragma once

#include <string>
#include <vector>

#include "models/safetensors.h"

namespace hr {

// One text encoder found in a file.
struct TextEncoderFound {
  // "clip_l", "clip_h", "clip_g" (HF CLIPTextModel layout, told apart by depth as ComfyUI does:
  // 31+ layers bigG, 23+ ViT-H, else CLIP-L), "t5xxl" (a T5 v1.1 encoder), or "t5_unsupported"
  // (a T5 encoder headroom cannot run, e.g. original T5's ReLU feed-forward).
  std::string kind;
  std::string prefix;       // in front of "text_model." / "encoder." ("" in a bare file)
  std::string description;  // "CLIP-L (12 layers, width 768)", "T5-XXL (24 layers, d_model 4096)"
};

// Every CLIP text model and T5 encoder in the file (header only, nothing is loaded).
std::vector<TextEncoderFound> text_encoder_file_detect(const SafetensorsFile& file);

// For messages: what the file holds, e.g. "CLIP-L (12 layers, width 768)", "CLIP-L (...) and
// T5-XXL (...)" or "no CLIP or T5 text encoder (its first keys: a, b, c)".
std::string text_encoder_file_describe(const SafetensorsFile& file,
                                       const std::vector<TextEncoderFound>& found);

}  // namespace hr
