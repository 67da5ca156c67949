// The values that flow along workflow links. Every value is an immutable shared_ptr so that
// std::any can copy it and the output cache can hand it to several consumers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/checkpoint.h"
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"

namespace hr {

// MODEL: the denoising UNet of a loaded checkpoint (or UNet-only file).
struct ModelValue {
  std::shared_ptr<LoadedModel> model;
};

// VAE: a loaded VAE (from a checkpoint or a VAE-only file).
struct VAEValue {
  std::shared_ptr<LoadedModel> model;
};

// One text encoder of a CLIP value.
struct TextEncoder {
  TextEncoderKind kind = TextEncoderKind::CLIP_L;
  CLIPTextConfig config;
  std::shared_ptr<WeightSet> weights;
};

// CLIP: the text encoder(s) and tokenizer of a checkpoint; layer is CLIPSetLastLayer's value
// (0: the family's default: -1 with final norm for SD1, -2 for SD2 and SDXL).
struct CLIPValue {
  ModelFamily family = ModelFamily::SD1;
  std::vector<TextEncoder> encoders;  // SD1/SD2: one; SDXL: CLIP-L then bigG
  std::shared_ptr<const Tokenizer> tokenizer;
  int layer = 0;
};

// CONDITIONING: a list of (cross-attention context, pooled output) entries.
struct CondEntry {
  std::shared_ptr<const HostTensor> cond;    // [1, tokens, width]
  std::shared_ptr<const HostTensor> pooled;  // [1, P] (may be null)
  // SDXL size conditioning (CLIPTextEncodeSDXL); unset means ComfyUI's defaults.
  std::optional<int64_t> width, height, crop_w, crop_h, target_width, target_height;
  std::optional<double> aesthetic_score;  // CLIPTextEncodeSDXLRefiner
};
struct Conditioning {
  std::vector<CondEntry> entries;
};

// LATENT: samples in VAE space [B, 4, h, w] (ComfyUI's convention).
struct Latent {
  std::shared_ptr<const HostTensor> samples;
  std::vector<int64_t> batch_index;  // empty: 0..B-1
};

// IMAGE: [B, H, W, C] float32 in [0, 1] (ComfyUI's layout). MASK: [B, H, W].
struct ImageValue {
  std::shared_ptr<const HostTensor> pixels;
};
struct MaskValue {
  std::shared_ptr<const HostTensor> mask;
};

}  // namespace hr
