// The Flux.1 DiT (ComfyUI comfy/ldm/flux/model.py Flux, layers.py): its configuration, read from
// a BFL/ComfyUI diffusion-model file's tensors, and the compute graph of one forward pass.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "models/safetensors.h"

namespace hr {

// Field names follow ComfyUI's FluxParams (comfy/model_detection.py fills them for Flux).
struct FluxConfig {
  int in_channels = 64;    // img_in width: patchified tokens, 16 latent channels x 2 x 2
  int out_channels = 64;   // final_layer.linear width
  int vec_in_dim = 768;    // CLIP-L pooled vector
  int context_in_dim = 4096;  // T5-XXL tokens
  int hidden_size = 3072;
  float mlp_ratio = 4.0f;
  int num_heads = 24;
  int depth = 19;                // double-stream blocks
  int depth_single_blocks = 38;  // single-stream blocks
  // RoPE axes (index, row, column); they sum to the head dim. Not readable from tensors:
  // ComfyUI fixes {16, 56, 56} for Flux.
  std::vector<int> axes_dim = {16, 56, 56};
  double theta = 10000.0;
  bool qkv_bias = true;
  bool guidance_embed = true;  // dev: true; schnell: false
  // fp8 weights of the loaded file and their scales (Note [fp8 weights] in graph/graph.h).
  std::shared_ptr<const WeightStorageMap> storage;
  std::string storage_key;

  int head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int mlp_hidden() const { return int(float(hidden_size) * mlp_ratio); }  // as int(h * ratio)
  bool operator==(const FluxConfig&) const = default;
  std::string str() const;
};

FluxConfig flux_config_dev();
FluxConfig flux_config_schnell();

// Reads the configuration from the shapes of the tensors whose names start with `prefix` ("" for
// a diffusion-model file, "model.diffusion_model." in a checkpoint). Heads come from the QK norm
// width (hidden / head dim); theta and axes_dim keep Flux's values, axes_dim left empty when the
// head width is not 128 (the caller sets it: it only shapes flux_pe_table). Every tensor the graph
// declares is then checked against the file: NOT_FOUND names the first missing one, CORRUPT a
// shape that differs.
Result<FluxConfig> flux_config_detect(const SafetensorsFile& file, std::string_view prefix);

// One forward pass for batch B, an h_tokens x w_tokens grid of 2x2 patches (L_img = h * w) and
// txt_tokens text tokens, computed in `dtype` (weights declared in `dtype`; names as in the file,
// prefix stripped). INPUTs: "img" [B, L_img, in_channels] (flux_patchify), "txt" [B, L_txt,
// context_in_dim], "timesteps" [B] f32 (sigma: the model scales it by 1000), "y" [B, vec_in_dim],
// "guidance" [B] f32 (guidance_embed only), "pe" [L_txt + L_img, head_dim / 2, 2] f32
// (flux_pe_table). OUTPUT: "out" [B, L_img, out_channels].
Result<Graph> flux_dit_graph(const FluxConfig& cfg, int64_t batch, int64_t h_tokens,
                             int64_t w_tokens, int64_t txt_tokens, DType dtype);

}  // namespace hr
