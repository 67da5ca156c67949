// Flux's token layout on the host: latents to 2x2-patch tokens and back (ComfyUI's rearrange in
// comfy/ldm/flux/model.py), and the RoPE table of the text and image token positions.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Note [flux patches]
// A latent [B, C, H, W] (H, W even) becomes tokens [B, (H/2)(W/2), 4C], token (h, w) in row-major
// order holding channel c's 2x2 patch at columns 4c + 2 ph + pw: ComfyUI's
// rearrange(x, "b c (h ph) (w pw) -> b (h w) (c ph pw)", ph=2, pw=2). Unpatchify is the inverse.
// (ComfyUI pads odd sizes to even first; callers here pass even sizes.) f32 in, f32 out.
Result<HostTensor> flux_patchify(const HostTensor& latent);
Result<HostTensor> flux_unpatchify(const HostTensor& tokens, int64_t channels, int64_t height,
                                   int64_t width);

// The "pe" input of flux_dit_graph: rope_table_flux of the ids ComfyUI builds (Flux._forward):
// txt_tokens rows of zeros, then (0, row, column) for the h_tokens x w_tokens image grid.
// f32 [txt_tokens + h_tokens * w_tokens, sum(axes_dim) / 2, 2].
Result<HostTensor> flux_pe_table(int64_t txt_tokens, int64_t h_tokens, int64_t w_tokens,
                                 std::span<const int> axes_dim, double theta);

}  // namespace hr
