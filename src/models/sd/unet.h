// The LDM/SGM UNet (SD1.x, SD2.x, SDXL): its configuration, read from checkpoint tensors, and
// the compute graph of one forward pass for concrete shapes. Weight names are the checkpoint's
// with the "model.diffusion_model." prefix stripped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "models/safetensors.h"

namespace hr {

class WeightSet;
class WeightSource;

// Field names follow ComfyUI's detect_unet_config so configurations compare one to one.
struct UNetConfig {
  int in_channels = 4;
  int out_channels = 4;
  int model_channels = 320;
  std::vector<int> channel_mult = {1, 2, 4, 4};
  std::vector<int> num_res_blocks = {2, 2, 2, 2};  // per level
  // Transformer depth of every input-block ResBlock (sum(num_res_blocks) entries, in block
  // order), of the middle block (0 = no middle transformer) and of every output block
  // (sum(num_res_blocks + 1) entries, ComfyUI's order: shallowest level first, i.e. entry k is
  // output_blocks.(n - 1 - k)). 0 = no SpatialTransformer after that ResBlock.
  std::vector<int> transformer_depth = {1, 1, 1, 1, 1, 1, 0, 0};
  int transformer_depth_middle = 1;
  std::vector<int> transformer_depth_output = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  int context_dim = 768;
  bool use_linear_in_transformer = false;  // proj_in/proj_out: Linear (SD2, SDXL) or 1x1 conv
  int adm_in_channels = 0;                 // SDXL label_emb input width; 0 = no label_emb
  int time_embed_dim = 1280;               // = 4 * model_channels in every SD model
  // Heads cannot be read from tensor shapes. Exactly one is > 0: a fixed head count (SD1: 8)
  // or a fixed head width (SD2/SDXL: 64), heads = channels / num_head_channels.
  int num_heads = 8;
  int num_head_channels = -1;
  // fp8 weights of the loaded file and their scales (Note [fp8 weights] in graph/graph.h);
  // null: every weight in the compute dtype.
  std::shared_ptr<const WeightStorageMap> storage;
  std::string storage_key;  // weight_storage_key(storage), made once at load

  int levels() const { return int(channel_mult.size()); }
  int heads_for(int channels) const {
    return num_heads > 0 ? num_heads : channels / num_head_channels;
  }
  bool operator==(const UNetConfig&) const = default;
  // One line, ComfyUI-like: "model_channels 32, channel_mult [1, 2, 2, 2], ...".
  std::string str() const;
};

// Full-size presets (as the real checkpoints are), for planning and make-model.
UNetConfig unet_config_sd15();
UNetConfig unet_config_sd2();
UNetConfig unet_config_sdxl();

// Reads the configuration from the shapes of the tensors whose names start with `prefix`
// (README "Reading the configuration from the tensors"). Heads default by projection kind:
// conv proj_in (SD1) -> num_heads 8; linear (SD2/SDXL) -> num_head_channels 64, or
// model_channels when that is below 64 (tiny test models: real models have >= 320).
// NOT_FOUND names the first tensor a UNet needs that is missing.
Result<UNetConfig> unet_config_detect(const SafetensorsFile& file, std::string_view prefix);

// One forward pass for batch B, latent H x W (multiples of 2^(levels-1)) and `tokens` context
// tokens, computed in `dtype` (weights are declared in `dtype`).
// INPUTs: "x" [B, in, H, W], "timesteps" [B] f32, "context" [B, tokens, context_dim], and "y"
// [B, adm_in_channels] when adm_in_channels > 0. OUTPUT: "out" [B, out, H, W].
// Node names follow the weight names ("input_blocks.1.1.transformer_blocks.0.attn1").
Result<Graph> unet_graph(const UNetConfig& cfg, int64_t batch, int64_t height, int64_t width,
                         int64_t tokens, DType dtype);

// Executor::min_device_bytes of the UNet graph for this shape (built once, as unet_run's).
Result<uint64_t> unet_min_device_bytes(Executor& ex, const UNetConfig& cfg, int64_t batch,
                                       int64_t height, int64_t width, int64_t tokens, DType dtype);

// Runs unet_graph for the inputs' shapes (built graphs are kept per configuration and shape,
// Note [graph reuse] in graph/graph_cache.cpp; their plans live in the executor's cache). Inputs of another float dtype are
// converted to `dtype`; the output is f32. `y` is required exactly when adm_in_channels > 0.
Result<HostTensor> unet_run(Executor& ex, const UNetConfig& cfg, WeightSource& weights, DType dtype,
                            const HostTensor& x, const HostTensor& timesteps,
                            const HostTensor& context, const HostTensor* y = nullptr);

}  // namespace hr
