// The configuration of a decoder-only LLM used as a text encoder (Qwen3, Qwen2.5, Llama shapes):
// named presets, and detection from a checkpoint's HF key layout and shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "memory/weight_set.h"
#include "models/safetensors.h"

namespace hr {

// Note [LLM hidden state]
// transformers' output_hidden_states numbering, which ComfyUI's Llama2_ ("all") and diffusers'
// pipelines share: hidden_states[0] is the embedding output, hidden_states[i] (1 <= i < layers)
// the output of layer i - 1 (0-based), hidden_states[layers] the last layer's output AFTER the
// final norm ("model.norm"). A negative index counts from the end (-1: the normed last state).
// Z-Image takes hidden_states[-2], the second-to-last layer's output WITHOUT the final norm:
//  - ComfyUI (comfy/text_encoders/z_image.py Qwen3_4BModel, newer than a125cd84, as
//    lumina2.py's Gemma2_2BModel at a125cd84): SDClipModel(layer="hidden", layer_idx=-2,
//    layer_norm_hidden_state=False) calls Llama2_.forward(intermediate_output=-2,
//    final_layer_norm_intermediate=False), which keeps x after layer index layers - 2 and does
//    not normalise it;
//  - diffusers' ZImagePipeline._encode_prompt: text_encoder(..., output_hidden_states=True)
//    .hidden_states[-2], then only the unmasked tokens. Its padding is on the right and the
//    attention causal, so the real tokens never see a pad: running them alone is the same.
// `output_norm` is ComfyUI's layer_norm_hidden_state for an index below `layers` (the index
// `layers` is always normed).
struct LLMConfig {
  int64_t vocab = 151936;
  int64_t hidden = 2560;
  int64_t intermediate = 9728;
  int layers = 36;
  int heads = 32;
  int kv_heads = 8;  // grouped-query attention: heads % kv_heads == 0
  int64_t head_dim = 128;
  float rope_theta = 1e6f;
  float rms_eps = 1e-6f;
  bool qkv_bias = false;         // q/k/v projections with bias (Qwen2.5)
  bool qk_norm = true;           // per-head RMS norm of q and k before RoPE (Qwen3)
  int output_hidden_state = -2;  // Note [LLM hidden state]
  bool output_norm = false;
  // fp8 or 16-bit weights kept in storage and cast at use (Note [fp8 weights] in graph/graph.h);
  // null: none.
  std::shared_ptr<const WeightStorageMap> storage;
};

// Presets from the models' published config.json (transformers' Qwen3Config / Qwen2Config
// numbers), all with Z-Image's output choice (hidden_states[-2], unnormed):
// qwen3_4b: Z-Image's and Flux.2 Klein 4B's encoder; qwen3_8b: Flux.2 Klein 9B's;
// qwen25_7b: Qwen2.5-VL-7B's language model (Qwen-Image's; text positions only, where its
// multimodal RoPE equals the 1-D one).
LLMConfig llm_config_qwen3_4b();
LLMConfig llm_config_qwen3_8b();
LLMConfig llm_config_qwen25_7b();
// "qwen3_4b", "qwen3_8b", "qwen25_7b"; NOT_FOUND names the known ones.
Result<LLMConfig> llm_config_preset(std::string_view name);

// The hidden_states index the config outputs, resolved to 0..layers (Note [LLM hidden state]);
// INVALID_ARGUMENT when out of range.
Result<int> llm_output_index(const LLMConfig& config);

// Every tensor of the model with its expected shape, HF names ("model.embed_tokens.weight",
// "model.layers.N.self_attn.q_proj.weight", ..., "model.norm.weight"), in reading order.
std::vector<std::pair<std::string, Shape>> llm_tensors(const LLMConfig& config);

// The prefix in front of "model.embed_tokens.weight" in a file ("" for ComfyUI's
// qwen_3_4b.safetensors); NOT_FOUND when the file holds no such model.
Result<std::string> llm_encoder_prefix(const SafetensorsFile& file);

// Reads the configuration from a WeightSet loaded with the prefix stripped, or from a file's
// header under `prefix` (nothing loaded). Shapes give vocab and hidden (embed_tokens), layers
// (model.layers.N), head_dim (q_norm's width; `head_dim` where there is no q_norm, as in Qwen2.5
// and Llama files, all of whose published sizes use 128), heads and kv_heads (q_proj, k_proj),
// intermediate (gate_proj), qkv_bias and qk_norm (presence); rope theta, eps and the output
// choice come from the preset of the same shape, else Qwen's 1e6 / 1e-6 and hidden_states[-2].
// Every tensor is checked for presence and shape; INVALID_ARGUMENT names the first one missing
// or mis-shaped.
Result<LLMConfig> llm_config_detect(const WeightSet& weights, int64_t head_dim = 128);
Result<LLMConfig> llm_config_detect(const SafetensorsFile& file, std::string_view prefix,
                                    int64_t head_dim = 128);

}  // namespace hr
