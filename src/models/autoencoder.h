// The autoencoder component of a loaded model (ComfyUI's VAE): latents to images and back, run
// whole, per image or tiled as the executor's room allows, and the decision as plain data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "memory/weight_set.h"

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

enum class VAEMode : uint8_t {
  WHOLE = 0,  // one run of the untiled graph for the whole batch
  PER_IMAGE,  // the untiled graph, one image at a time
  TILED,      // tiled with the decision's tile and overlap, one image at a time
};
const char* vae_mode_name(VAEMode m);  // "whole", "per image", "tiled"

// How a VAE call runs and why (Note [VAE auto tiling] in sd/vae_tiled.cpp). Plain data.
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

struct VAEMoments {
  HostTensor mean;    // f32; what ComfyUI's VAEEncode returns
  HostTensor logvar;  // f32, clamped to [-30, 20]
};

struct VAEDecoded {
  HostTensor image;  // f32 [B, 3, H, W], raw (about [-1, 1])
  VAEDecision decision;
};
struct VAEEncoded {
  VAEMoments moments;
  VAEDecision decision;
};

class Autoencoder {
 public:
  virtual ~Autoencoder() = default;
  virtual WeightSet& weights() = 0;
  virtual int64_t downscale() const = 0;  // image pixels per latent pixel
  virtual int latent_channels() const = 0;

  // The decision alone, without running (the plan's question; Note [VAE auto tiling]).
  virtual Result<VAEDecision> decode_decide(Executor& ex, const Shape& latent_shape) = 0;
  virtual Result<VAEDecision> encode_decide(Executor& ex, const Shape& image_shape) = 0;
  // Decide, then run as decided. `before_tile` (interrupt checks) is called before each tile of
  // a TILED run and before each image after the first of a PER_IMAGE run.
  virtual Result<VAEDecoded> decode(Executor& ex, const HostTensor& latent,
                                    const std::function<Status()>& before_tile = {}) = 0;
  virtual Result<VAEEncoded> encode(Executor& ex, const HostTensor& image,
                                    const std::function<Status()>& before_tile = {}) = 0;
  // ComfyUI's VAEDecodeTiled: tiled as asked, whatever the room.
  virtual Result<HostTensor> decode_tiled(Executor& ex, const HostTensor& latent,
                                          const VAETileOptions& tiles) = 0;
};

}  // namespace hr
