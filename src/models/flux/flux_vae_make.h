// The Flux.1 autoencoder's files for `headroom make-model`: its configuration (tiny and full
// size) and random weights in the key layout of BFL's ae.safetensors, bare or under the prefix
// of a single-file checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/status.h"
#include "memory/weight_set.h"
#include "models/make_model.h"
#include "models/sd/vae.h"

namespace hr {

// Where a single-file Flux checkpoint keeps its VAE (comfy/supported_models.py Flux
// vae_key_prefix; comfy/sd.py load_state_dict_guess_config strips it before VAE(sd=...)).
inline constexpr const char* kFluxVAEPrefix = "vae.";

// Note [flux vae]
// The Flux.1 autoencoder is the LDM AutoencoderKL's Encoder / Decoder (comfy/ldm/modules/
// diffusionmodules/model.py) with ComfyUI's default ddconfig (ch 128, ch_mult [1, 2, 4, 4],
// num_res_blocks 2, double_z) and z_channels 16, and without quant_conv / post_quant_conv:
// comfy/sd.py VAE.__init__ takes z_channels from decoder.conv_in's input channels and, finding
// no post_quant_conv, builds an AutoencodingEngine (comfy/ldm/models/autoencoder.py), whose
// encode is encoder -> DiagonalGaussianRegularizer (the mean, as VAEEncode returns it) and whose
// decode is the decoder alone. vae_config_detect reads exactly that from the tensors
// (use_quant_conv false, embed_dim = z_channels), so the SD family's VAE component runs it. Its
// latent format's scale and shift (latent_format_flux) belong to the sampler, not the VAE.
//
// FULL is BFL's ae.safetensors (83.8 M parameters, stored in f32); TINY keeps the tiny SD VAE's
// widths (ch 32, ch_mult [1, 2, 2, 2]: downscale 8, as Flux latents need) with z_channels 16.
VAEConfig flux_vae_config(ModelSize size);

// Every tensor of the layout, "<prefix><name>" -> shape (sorted by name): the weights the
// decoder and encoder graphs read, so each name is one the loader looks for.
Result<std::map<std::string, Shape>> flux_vae_tensors(const VAEConfig& cfg,
                                                      std::string_view prefix);

// Random weights (Note [random init] in models/make_model.cpp) for every tensor of the layout,
// drawn in name order from one generator seeded with `seed`, stored in `dtype`, put into `out`
// under "<prefix><name>". Returns the number of parameters.
Result<uint64_t> flux_vae_random_weights(const VAEConfig& cfg, std::string_view prefix,
                                         uint64_t seed, DType dtype, WeightSet& out);

// Writes a bare ae.safetensors of random weights (no prefix; headroom's make-model metadata) to
// `path`; returns the number of parameters written.
Result<uint64_t> make_flux_vae(ModelSize size, uint64_t seed, DType dtype,
                               const std::string& path);

}  // namespace hr
