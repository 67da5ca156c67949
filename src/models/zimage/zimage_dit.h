// The Z-Image DiT (diffusers ZImageTransformer2DModel; ComfyUI's NextDiT with z_image_modulation):
// the compute graph of one forward pass and one call as ComfyUI's sampler makes it.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "models/zimage/zimage_config.h"
#include "models/zimage/zimage_tokens.h"

namespace hr {

// One forward pass for batch B, an h_tokens x w_tokens grid of 2x2 patches and cap_tokens caption
// tokens (one length for the batch), computed in `dtype` (weights declared in `dtype`, names as
// in ComfyUI's file, prefix stripped). INPUTs: "img" [B, h * w, 4 C] (zimage_patchify), "context"
// [B, cap_tokens, cap_feat_dim] (the text encoder's hidden states), "sigma" [B] f32 (what
// ComfyUI's CONST model sampling passes as the timestep), "pe" [Lc + Li, head_dim / 2, 2] f32
// (zimage_pe_table). OUTPUT: "out" [B, h * w, 4 C] in ComfyUI's sign (Note [z-image time and sign]
// in zimage_dit.cpp).
Result<Graph> zimage_dit_graph(const ZImageConfig& cfg, int64_t batch, int64_t h_tokens,
                               int64_t w_tokens, int64_t cap_tokens, DType dtype);

// One DiT call's inputs on the host, f32: the latent x [B, C, H, W] (any H, W: odd sizes padded
// as ComfyUI does, the output cropped back), sigma [B] and the caption context [B, L,
// cap_feat_dim].
struct ZImageInputs {
  const HostTensor* x = nullptr;
  const HostTensor* sigma = nullptr;
  const HostTensor* context = nullptr;
};

// Runs the DiT (graphs kept per configuration and shape, Note [graph reuse] in
// graph/graph_cache.cpp) and returns the model output [B, C, H, W] f32, as ComfyUI's
// NextDiT.forward returns it for (x, timesteps = sigma, context): the flow velocity that CONST
// model sampling turns into denoised = x - sigma * out.
Result<HostTensor> zimage_dit_run(Executor& ex, const ZImageConfig& cfg, WeightSource& weights,
                                  DType dtype, const ZImageInputs& in);

// Executor::min_device_bytes of the DiT graph for a [B, C, H, W] latent and `cap_tokens` tokens.
Result<uint64_t> zimage_dit_min_device_bytes(Executor& ex, const ZImageConfig& cfg,
                                             const Shape& latent, int64_t cap_tokens, DType dtype);

}  // namespace hr
