// `headroom make-model --arch flux`: a ComfyUI models folder of random Flux.1-dev weights in the
// published layouts (the DiT, T5-XXL, CLIP-L, the autoencoder, and all four in one checkpoint).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/flux/flux_dit.h"
#include "models/make_model.h"
#include "models/make_model_files.h"
#include "models/sd/clip_text.h"
#include "models/sd/vae.h"
#include "models/t5/t5_encoder.h"

namespace hr {

struct FluxMakeConfig {
  FluxConfig dit;
  T5Config t5;
  CLIPTextConfig clip;
  VAEConfig vae;
};

// FULL: the published sizes (DiT dev 11.9 B, T5-XXL 4.76 B, CLIP-L 123 M, the 16-channel
// autoencoder 83.7 M). TINY: the same layouts, small enough for tests (Note [tiny flux]).
FluxMakeConfig flux_make_config(ModelSize size);

using FluxMadeFile = MadeFile;  // a file written, under the output folder

// Writes, under out_dir (created as needed):
//   diffusion_models/flux1-dev.safetensors  the DiT, BFL names, bf16
//   text_encoders/t5xxl_fp16.safetensors    T5 v1.1 XXL encoder, HF names, f16
//   text_encoders/clip_l.safetensors        CLIP-L text model, HF names, f16
//   vae/ae.safetensors                      the autoencoder, LDM names, f32
//   checkpoints/flux1-dev-all.safetensors   the four under ComfyUI's single-file prefixes
//                                           (not with `checkpoint` false: at full size it doubles
//                                           the 34 GB the other four take)
// Every tensor is made and written piece by piece (nothing the size of a file is held), from a
// generator seeded by (seed, component, name): a tensor has the same values in its own file and
// in the checkpoint (Note [flux random init] in models/make_model_files.cpp).
Result<std::vector<FluxMadeFile>> flux_make_model_write(const MakeModelSpec& spec,
                                                        const std::string& out_dir,
                                                        bool checkpoint = true);

}  // namespace hr
