// The cos/sin tables ROPE (backend/op.h) reads: Flux's multi-axis table from position ids
// (ComfyUI's EmbedND / rope()) and the one-axis Llama/Qwen table (precompute_freqs_cis).
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Note [rope tables]
// A table is f32 [N, D/2, 2]: for token n and pair p, (cos, sin) of the pair's angle; ROPE
// rotates x[:, n, :, pair p] by it (shared by the batch; a per-sample table is these stacked,
// [B, N, D/2, 2]).
//
// Flux (comfy/ldm/flux/layers.py EmbedND, comfy/ldm/flux/math.py rope): each token has one
// position per axis (ids [N, A]; Flux: A = 3, (index, row, column) for image tokens, all 0 for
// text tokens, axes_dim {16, 56, 56}, theta 10000, D = 128). Axis a contributes axes_dim[a] / 2
// pairs, axis 0's first (EmbedND concatenates along the pair dim). For axis dim d and pair i:
//   scale_i = linspace(0, (d - 2) / d, d / 2)[i]       float64
//   omega_i = 1 / theta^scale_i                        float64
//   angle   = float32(position) * omega_i              float64 (einsum promotes f32 x f64)
//   (cos, sin) of the angle in float64, then rounded to float32
// linspace is torch's symmetric form (start + step * i for the first half, end - step *
// (steps - 1 - i) for the rest, step = (end - start) / (steps - 1)); the ids are f32 here, ComfyUI
// makes them in the latent's dtype (exact integers up to 256 in bf16, 2048 in f16).
//
// Llama/Qwen (comfy/text_encoders/llama.py precompute_freqs_cis, no rope_scale): all in float32,
//   inv_freq_i = 1 / theta^(float32(2i) / D),  angle = inv_freq_i * float32(position)
// with cos/sin in float32; the reference's table repeats the D/2 angles for both halves
// (cat(freqs, freqs)), which ROPE's half-split pairs read once.

// Flux's table for `ids` (row-major [N, axes_dim.size()]): f32 [N, sum(axes_dim) / 2, 2].
// INVALID_ARGUMENT for an odd or non-positive axis dim or ids not a whole number of rows.
Result<HostTensor> rope_table_flux(std::span<const float> ids, std::span<const int> axes_dim,
                                   double theta);

// The Llama/Qwen table for `positions`: f32 [N, head_dim / 2, 2].
Result<HostTensor> rope_table_llama(std::span<const float> positions, int head_dim, float theta);

}  // namespace hr
