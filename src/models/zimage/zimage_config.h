// The Z-Image DiT's configuration (diffusers ZImageTransformer2DModel's config, ComfyUI's NextDiT
// with z_image_modulation), read from the tensors of a file in ComfyUI's key layout.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "models/safetensors.h"

namespace hr {

// Note [z-image key layout]
// headroom reads ComfyUI's layout (z_image_turbo_bf16.safetensors; no prefix in a diffusion-model
// file, "model.diffusion_model." in a checkpoint). diffusers' names map to it as the inverse of
// convert_z_image_transformer_checkpoint_to_diffusers (diffusers loaders/single_file_utils.py):
//   ComfyUI                                  diffusers
//   x_embedder.{weight,bias}                 all_x_embedder.2-1.*
//   final_layer.linear.*                     all_final_layer.2-1.linear.*
//   final_layer.adaLN_modulation.1.*         all_final_layer.2-1.adaLN_modulation.1.* (SiLU first)
//   <block>.attention.qkv.weight [3 dim, dim] <block>.attention.to_q / to_k / to_v (row thirds)
//   <block>.attention.out.weight             <block>.attention.to_out.0.weight
//   <block>.attention.{q,k}_norm.weight      <block>.attention.norm_{q,k}.weight [head dim]
// and the same elsewhere: t_embedder.mlp.{0,2}.*, cap_embedder.0.weight (RMSNorm) and
// cap_embedder.1.* (Linear), x_pad_token and cap_pad_token [1, dim], and per block
// (noise_refiner.i, context_refiner.i, layers.i) attention_norm1/2, ffn_norm1/2 (RMSNorm weights),
// feed_forward.w1/w2/w3 (no bias) and, in the modulated blocks (noise_refiner, layers),
// adaLN_modulation.0.{weight,bias} [4 dim, adaln_dim] (a bare Linear, no SiLU). A stray
// norm_final.weight (Lumina2's unused RMSNorm, which diffusers' converter drops) is ignored.
struct ZImageConfig {
  int in_channels = 16;  // latent channels; x_embedder reads 2 x 2 patches (4 C)
  int dim = 3840;
  int n_layers = 30;         // main single-stream layers
  int n_refiner_layers = 2;  // noise_refiner and context_refiner each
  int n_heads = 30;
  int cap_feat_dim = 2560;  // Qwen3-4B hidden states
  int adaln_dim = 256;      // min(dim, 256): t_embedder's output, adaLN_modulation's input
  int t_hidden = 1024;      // t_embedder.mlp.0 width
  int ffn_hidden = 10240;   // int(dim / 3 * 8)
  // RoPE axes (caption / frame index, row, column), summing to the head dim; not readable from
  // tensors: Z-Image's are {32, 48, 48} (head dim 128), left empty for other head widths.
  std::vector<int> axes_dim = {32, 48, 48};
  double rope_theta = 256.0;
  float t_scale = 1000.0f;  // the model embeds (1 - sigma) * t_scale
  float norm_eps = 1e-5f;   // the block and caption RMSNorms
  // diffusers' Attention(qk_norm="rms_norm", eps=1e-5); ComfyUI's q_norm / k_norm take torch's
  // default (finfo(dtype).eps): the same within f32 rounding for any non-tiny q.
  float qk_norm_eps = 1e-5f;
  int pad_multiple = 32;  // SEQ_MULTI_OF / pad_tokens_multiple
  // fp8 weights of the loaded file and their scales (Note [fp8 weights] in graph/graph.h).
  std::shared_ptr<const WeightStorageMap> storage;
  std::string storage_key;

  int head_dim() const { return n_heads > 0 ? dim / n_heads : 0; }
  int patch_width() const { return 4 * in_channels; }  // a 2 x 2 patch of every channel
  bool operator==(const ZImageConfig&) const = default;
  std::string str() const;
};

// Z-Image Turbo's transformer/config.json (Tongyi-MAI/Z-Image-Turbo; diffusers' defaults): dim
// 3840, 30 heads, 30 layers, 2 refiner layers, cap_feat_dim 2560, axes_dims [32, 48, 48],
// rope_theta 256, t_scale 1000, norm_eps 1e-5. Its axes_lens [1536, 512, 512] only size diffusers'
// table of precomputed angles; headroom (as ComfyUI) computes the angles of any position.
ZImageConfig zimage_config_turbo();

// Reads the configuration from the shapes of the tensors whose names start with `prefix`: dim and
// in_channels from x_embedder, heads from the QK norm width, the layer counts, the caption,
// timestep and FFN widths; axes_dim kept as Z-Image's when they fit the head width, else empty
// (the caller sets them). Every tensor the graph declares is then checked against the file:
// NOT_FOUND names the first missing one, CORRUPT one whose shape differs.
Result<ZImageConfig> zimage_config_detect(const SafetensorsFile& file, std::string_view prefix);

}  // namespace hr
