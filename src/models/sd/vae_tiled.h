// Tiled VAE decode and encode (ComfyUI's tiled_scale: the mean of three tilings, each blended
// with feathered masks) and the choice, made from the executor's arena plans, between a whole,
// a per-image and a tiled run when the untiled plan does not fit the allocator's budget.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "models/autoencoder.h"
#include "models/sd/sd_vae.h"

namespace hr {

// ComfyUI VAE.decode_tiled_ / encode_tiled_ (Note [tiled scale] in vae_tiled.cpp), image by
// image. Memory is bounded by the largest tile graph's arena, except that a tiling that holds
// the whole image in one tile decodes (encodes) the image whole, as ComfyUI does.
Result<HostTensor> vae_decode_tiled(Executor& ex, SDVAE& model, const HostTensor& latent,
                                    const VAETileOptions& tiles);
Result<VAEMoments> vae_encode_tiled(Executor& ex, SDVAE& model, const HostTensor& image,
                                    const VAETileOptions& tiles);

// Decides without running anything: plans the untiled graph for `latent_shape` ([B, C, h, w])
// or `image_shape` ([B, C, H, W]) and, when its arena exceeds ex.arena_room(), smaller ones.
// OUT_OF_MEMORY (with the allocator's segments) when not even the smallest tile fits; the
// message names the VAE, the untiled and smallest-tile arenas and the room. The room counts
// the VAE weights already resident (the *_auto runners upload them first); when nothing fits
// with them resident, the room with them streamed is tried (weights_stream).
Result<VAEDecision> vae_decode_decide(Executor& ex, SDVAE& model, const Shape& latent_shape);
Result<VAEDecision> vae_encode_decide(Executor& ex, SDVAE& model, const Shape& image_shape);
// The same decision for a VAE known by its config alone, against a given room (planning a
// workflow without loading it: workflow/workflow_plan.h). The executor only plans.
Result<VAEDecision> vae_decide_for(Executor& ex, const VAEConfig& cfg, DType dtype,
                                   const Shape& shape, bool decode, uint64_t room,
                                   uint64_t room_all);

// Decide, then run as decided. `before_tile` (interrupt checks) is called before each tile of a
// TILED run and before each image after the first of a PER_IMAGE run.
Result<VAEDecoded> vae_decode_auto(Executor& ex, SDVAE& model, const HostTensor& latent,
                                   const std::function<Status()>& before_tile = {});
Result<VAEEncoded> vae_encode_auto(Executor& ex, SDVAE& model, const HostTensor& image,
                                   const std::function<Status()>& before_tile = {});

}  // namespace hr
