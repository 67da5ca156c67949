// Z-Image's token layout on the host: latents to 2x2-patch tokens and back, the padded lengths of
// the caption and image sequences, and the RoPE table of their positions.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Note [z-image patches]
// A latent [B, C, H, W] becomes tokens [B, ceil(H/2) ceil(W/2), 4C]: token (h, w) in row-major
// order holds its 2x2 patch at columns (2 ph + pw) C + c, channel last (diffusers _patchify_image:
// view(C, F, 1, Ht, 2, Wt, 2).permute(1, 3, 5, 2, 4, 6, 0); ComfyUI NextDiT embed_all the same
// with permute(0, 2, 3, 5, 4, 6, 1)); Flux's order is channel first (Note [flux patches]). An odd
// H or W is padded first as ComfyUI's pad_to_patch_size does (circular: the first row / column
// again). Unpatchify is the inverse onto the padded size; the caller crops.
Result<HostTensor> zimage_patchify(const HostTensor& latent);
Result<HostTensor> zimage_unpatchify(const HostTensor& tokens, int64_t channels, int64_t h_tokens,
                                     int64_t w_tokens);

// `n` rounded up to a multiple of `multiple` (the pad tokens appended to each sequence).
int64_t zimage_padded_len(int64_t n, int multiple);

// Note [z-image positions]
// The joint sequence is the caption (L_cap tokens, padded with cap_pad_token to Lc, a multiple of
// 32), then the image (h x w tokens, padded with x_pad_token to Li). Position ids (t, row, col):
//   caption row i, pads too    (1 + i, 0, 0)      for i in [0, Lc)
//   image token (r, c)         (Lc + 1, r, c)
//   image pad tokens           (0, 0, 0)
// ComfyUI's NextDiT (embed_cap, embed_all) builds these directly. diffusers' _pad_with_ids gives
// the caption a grid of Lc numbered rows plus (Lc - L_cap) rows of (0, 0, 0), and
// _prepare_sequence cuts the table to the Lc feature rows, leaving the numbered ones: the same ids
// (for one sample or equal caption lengths; diffusers masks unequal ones, which headroom runs
// as separate calls). diffusers orders the joint sequence image first; unmasked attention does
// not depend on the order (each token keeps its position), so headroom uses ComfyUI's
// caption-first order.

// The "pe" input of zimage_dit_graph: rope_table_flux (models/rope_table.h) of the ids above for
// the padded caption then the padded image, f32 [Lc + Li, sum(axes_dim) / 2, 2]. ComfyUI computes
// the table as rope_table_flux does (EmbedND, float64 angles); diffusers rounds each angle to
// float32 before its cos/sin, a difference of one float32 rounding of the angle.
Result<HostTensor> zimage_pe_table(int64_t cap_tokens, int64_t h_tokens, int64_t w_tokens,
                                   int pad_multiple, std::span<const int> axes_dim, double theta);

}  // namespace hr
