// The values that flow along workflow links. Every value is an immutable shared_ptr so that
// std::any can copy it and the output cache can hand it to several consumers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "memory/patched_weights.h"
#include "models/checkpoint.h"
#include "models/conditioning.h"
#include "models/text_encoder.h"

namespace hr {

// MODEL: the diffusion model of a loaded checkpoint (or diffusion-model-only file), seen through
// the LoRAs applied to it (ComfyUI's ModelPatcher clone with patches): `patched` is the weight
// store with its patch set (Note [patched weights]), null when none.
struct ModelValue {
  std::shared_ptr<LoadedModel> model;
  std::shared_ptr<PatchedWeights> patched;
  // The model sampling a node set on this view (ComfyUI's add_object_patch("model_sampling"):
  // ModelSamplingFlux); nullopt: the diffusion model's own.
  std::optional<ModelSamplingSpec> sampling;

  ModelSamplingSpec sampling_spec() const {
    return sampling ? *sampling : model->diffusion->sampling();
  }

  // The weights a model call reads.
  WeightSource& weights() const {
    return patched ? static_cast<WeightSource&>(*patched) : model->diffusion->weights();
  }
};

// VAE: a loaded autoencoder (from a checkpoint or a VAE-only file).
struct VAEValue {
  std::shared_ptr<LoadedModel> model;
};

// CLIP: the file's text-encoder component (its family's tokenizer and encoders); layer is
// CLIPSetLastLayer's value (0: the family's default); `patched` holds per encoder its store with
// the LoRAs applied to it (null or missing: none).
struct CLIPValue {
  std::shared_ptr<const TextEncoder> encoder;
  int layer = 0;
  std::vector<std::shared_ptr<PatchedWeights>> patched;

  EncoderSources sources() const {
    EncoderSources s;
    for (const auto& p : patched) s.push_back(p.get());
    return s;
  }
};

// CONDITIONING: models/conditioning.h (context plus the family's extras per entry).

// LATENT: samples in VAE space [B, C, h, w] (ComfyUI's convention; C = 4 for SD, 16 for SD3 and
// Flux; the sampler moves them to model space, Note [latent format shift]).
struct Latent {
  std::shared_ptr<const HostTensor> samples;
  std::vector<int64_t> batch_index;  // empty: 0..B-1
  // ComfyUI's "noise_mask" [Bm, 1, H, W] (SetLatentNoiseMask); null: none. Nodes that copy the
  // latent dict carry it as ComfyUI does (unchanged unless the node rewrites it).
  std::shared_ptr<const HostTensor> noise_mask;
};

// IMAGE: [B, H, W, C] float32 in [0, 1] (ComfyUI's layout). MASK: [B, H, W].
struct ImageValue {
  std::shared_ptr<const HostTensor> pixels;
};
struct MaskValue {
  std::shared_ptr<const HostTensor> mask;
};

}  // namespace hr
