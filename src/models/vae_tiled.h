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
#include "models/checkpoint.h"

namespace hr {

// Tiles in image pixels, as ComfyUI's VAEDecodeTiled / VAEEncodeTiled take them. Decode divides
// both by the VAE's downscale (8) to get latent pixels (ComfyUI's `tile_size // compression`);
// encode uses them as they are and needs tile_px / 2 and overlap_px to be multiples of the
// downscale (the image's sides already are: VAEEncode crops them).
struct VAETileOptions {
  int64_t tile_px = 512;
  int64_t overlap_px = 64;
  // Called before each tile runs; an error (an interrupt) stops the work and is returned.
  std::function<Status()> before_tile;
  // One square tiling with feathered overlaps (automatic tiling, Note [VAE auto tiling])
  // instead of ComfyUI's three tilings averaged (the VAEDecodeTiled / VAEEncodeTiled nodes).
  bool one_pass = false;
};

// ComfyUI VAE.decode_tiled_ / encode_tiled_ (Note [tiled scale] in vae_tiled.cpp), image by
// image. Memory is bounded by the largest tile graph's arena, except that a tiling that holds
// the whole image in one tile decodes (encodes) the image whole, as ComfyUI does.
Result<HostTensor> vae_decode_tiled(Executor& ex, LoadedModel& model, const HostTensor& latent,
                                    const VAETileOptions& tiles);
Result<VAEMoments> vae_encode_tiled(Executor& ex, LoadedModel& model, const HostTensor& image,
                                    const VAETileOptions& tiles);

enum class VAEMode : uint8_t {
  WHOLE = 0,  // one run of the untiled graph for the whole batch
  PER_IMAGE,  // the untiled graph, one image at a time
  TILED,      // vae_*_tiled with the decision's tile and overlap, one image at a time
};
const char* vae_mode_name(VAEMode m);  // "whole", "per image", "tiled"

// How a VAE call runs and why (Note [VAE auto tiling] in vae_tiled.cpp). Plain data.
struct VAEDecision {
  VAEMode mode = VAEMode::WHOLE;
  int64_t tile_px = 0, overlap_px = 0;  // TILED: image pixels (VAETileOptions)
  int64_t rows = 0, cols = 0;           // TILED: tiles per image of the square tiling
  uint64_t arena_bytes = 0;             // the untiled plan's arena for the whole batch
  uint64_t run_arena_bytes = 0;         // the largest arena among the graphs that will run
  uint64_t room = 0;                    // Executor::arena_room() when deciding
  bool weights_stream = false;          // only fits with the VAE's weights streamed
  // One line, e.g. "VAE decode tiled 4x4 at 256 px: arena 1.3 GiB > 0.9 GiB left; tile arena
  // 310 MiB".
  std::string reason;
  bool tiled() const { return mode == VAEMode::TILED; }
};

// Decides without running anything: plans the untiled graph for `latent_shape` ([B, C, h, w])
// or `image_shape` ([B, C, H, W]) and, when its arena exceeds ex.arena_room(), smaller ones.
// OUT_OF_MEMORY (with the allocator's segments) when not even the smallest tile fits; the
// message names the VAE, the untiled and smallest-tile arenas and the room. The room counts
// the VAE weights already resident (the *_auto runners upload them first); when nothing fits
// with them resident, the room with them streamed is tried (weights_stream).
Result<VAEDecision> vae_decode_decide(Executor& ex, LoadedModel& model, const Shape& latent_shape);
Result<VAEDecision> vae_encode_decide(Executor& ex, LoadedModel& model, const Shape& image_shape);
// The same decision for a VAE known by its config alone, against a given room (planning a
// workflow without loading it: workflow/workflow_plan.h). The executor only plans.
Result<VAEDecision> vae_decide_for(Executor& ex, const VAEConfig& cfg, DType dtype,
                                   const Shape& shape, bool decode, uint64_t room,
                                   uint64_t room_all);

struct VAEDecoded {
  HostTensor image;  // f32 [B, 3, H, W], raw (as vae_decode)
  VAEDecision decision;
};
struct VAEEncoded {
  VAEMoments moments;
  VAEDecision decision;
};

// Decide, then run as decided. `before_tile` (interrupt checks) is called before each tile of a
// TILED run and before each image after the first of a PER_IMAGE run.
Result<VAEDecoded> vae_decode_auto(Executor& ex, LoadedModel& model, const HostTensor& latent,
                                   const std::function<Status()>& before_tile = {});
Result<VAEEncoded> vae_encode_auto(Executor& ex, LoadedModel& model, const HostTensor& image,
                                   const std::function<Status()>& before_tile = {});

}  // namespace hr
