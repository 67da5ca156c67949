// `headroom make-model --arch zimage`: a ComfyUI models folder of random Z-Image weights in the
// published layouts (the DiT, Qwen3-4B, Flux's autoencoder).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "models/llm/llm_config.h"
#include "models/make_model.h"
#include "models/make_model_files.h"
#include "models/sd/vae.h"
#include "models/zimage/zimage_config.h"

namespace hr {

struct ZImageMakeConfig {
  ZImageConfig dit;
  LLMConfig llm;
  VAEConfig vae;
};

// FULL: the published sizes (Turbo's DiT 6.15 B, Qwen3-4B, the 16-channel autoencoder). TINY:
// the same layouts, small enough for tests (Note [tiny z-image]).
ZImageMakeConfig zimage_make_config(ModelSize size);

// Writes, under out_dir (created as needed), every tensor drawn as Flux's make-model draws them
// (Note [flux random init] in models/make_model_files.cpp):
//   diffusion_models/z_image_turbo_bf16.safetensors  the DiT, ComfyUI's names, bf16
//   text_encoders/qwen_3_4b.safetensors              Qwen3, HF names, bf16
//   vae/ae.safetensors                               the autoencoder, LDM names, f32
Result<std::vector<MadeFile>> zimage_make_model_write(const MakeModelSpec& spec,
                                                      const std::string& out_dir);

}  // namespace hr
