// CLIP text encoders as graphs: configuration (read from the weights), the transformer graph for
// [B, 77] token rows, pooling/projection, and ComfyUI's CLIPTextEncode (chunk batching, token
// weights, clip skip) on top of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "memory/weight_set.h"
#include "models/prompt_weights.h"
#include "models/safetensors.h"

namespace hr {

enum class CLIPLayout : uint8_t {
  HF,         // transformers CLIPTextModel: "text_model.encoder.layers.N.self_attn.q_proj..."
  OPEN_CLIP,  // OpenCLIP: "transformer.resblocks.N.attn.in_proj_weight" = cat(q, k, v)
};
enum class CLIPActivation : uint8_t { QUICK_GELU, GELU };

struct CLIPTextConfig {
  CLIPLayout layout = CLIPLayout::HF;
  int64_t vocab = 49408;
  int64_t positions = 77;
  int64_t width = 768;
  int layers = 12;
  int heads = 12;
  int64_t mlp = 3072;
  CLIPActivation activation = CLIPActivation::QUICK_GELU;
  float eps = 1e-5f;
  bool has_projection = false;
  int64_t projection_dim = 0;
  DType dtype = DType::F32;  // the weights' dtype in the WeightSet; the graph computes in it
  // HF layout: the level above "embeddings." ("text_model." in SD files; empty in files written
  // by older transformers versions).
  std::string hf_root = "text_model.";
  // fp8 weights and their scales (Note [fp8 weights] in graph/graph.h); null: none.
  std::shared_ptr<const WeightStorageMap> storage;
};

// Reads the configuration from a WeightSet loaded with the encoder's prefix stripped
// (tiny-sd1: "cond_stage_model.transformer.", SDXL: "conditioner.embedders.0.transformer." and
// "conditioner.embedders.1.model."). Heads cannot be read from shapes: `heads` > 0 overrides,
// else width / 64 (12 for CLIP-L, 20 for bigG, 16 for SD2's ViT-H). The activation is a
// per-architecture constant: OpenCLIP layout and HF layout of width >= 1024 (bigG / ViT-H in
// diffusers form) use gelu, CLIP-L quick_gelu. INVALID_ARGUMENT when no CLIP text encoder is found.
Result<CLIPTextConfig> clip_text_detect(const WeightSet& weights, int heads = 0);
// The same from a file's header alone (nothing is loaded): the tensors under `prefix`, floats
// taken as `dtype` (the compute dtype they would be loaded in).
Result<CLIPTextConfig> clip_text_detect(const SafetensorsFile& file, std::string_view prefix,
                                        DType dtype, int heads = 0);

// What one graph computes for a batch of rows.
struct CLIPTextGraphOptions {
  int64_t batch = 1;
  // Hidden state to return (ComfyUI's CLIPSetLastLayer): -1 = last layer, -2 = penultimate, ...;
  // i.e. HF hidden_states[layer]. Must satisfy 1 <= -layer <= layers.
  int layer = -1;
  bool layer_final_norm = true;    // apply the final LayerNorm to that hidden state
  bool last_hidden_state = false;  // also output final_ln(last layer) (needed for pooling)
  bool embeddings = false;         // also output token + position embeddings
};

// The graph and where each output lands in Executor::run's result (-1 = not requested).
struct CLIPTextGraph {
  Graph graph;
  int hidden = -1;      // [B, 77, width]
  int last = -1;        // [B, 77, width]
  int embeddings = -1;  // [B, 77, width]
};

// Builds the encoder for token ids "ids" (I64 [batch, positions]). Layers after the requested
// hidden state are built only when last_hidden_state is asked for.
Result<CLIPTextGraph> clip_text_graph(const CLIPTextConfig& config,
                                      const CLIPTextGraphOptions& options);

// Rows of `last_hidden` [B, N, C] (f32) at each row's first `eos` (argmax of the ids when a row
// has none) -> [B, C]. Like HF/ComfyUI pooling; for CLIP vocabularies EOS is also the largest id.
HostTensor clip_text_pool(const HostTensor& last_hidden,
                          const std::vector<std::vector<int32_t>>& ids, int32_t eos);

// pooled [B, C] @ the checkpoint's projection: OpenCLIP "text_projection" [C, P] used as x @ P,
// HF "text_projection.weight" [P, C] used as a Linear. Returns pooled unchanged when the config
// has no projection.
Result<HostTensor> clip_text_project(const HostTensor& pooled, const WeightSet& weights,
                                     const CLIPTextConfig& config);

// Runs the encoder on token rows and returns the requested hidden states on the host (f32).
struct CLIPTextRun {
  HostTensor hidden;      // [B, N, C] at options.layer
  HostTensor last;        // final_ln(last layer) when asked for
  HostTensor embeddings;  // when asked for
};
Result<CLIPTextRun> clip_text_run(Executor& executor, WeightSource& weights,
                                  const CLIPTextConfig& config,
                                  const std::vector<std::vector<int32_t>>& rows,
                                  const CLIPTextGraphOptions& options);

// ComfyUI CLIPTextEncode for one encoder (ClipTokenWeightEncoder.encode_token_weights).
struct CLIPEncodeOptions {
  int layer = -1;                // SD1 default -1; CLIPSetLastLayer(-2) -> -2; SDXL encoders -2
  bool layer_final_norm = true;  // SD1: true (also with clip skip); SDXL: false
  int32_t pad = CLIPTokenizer::kEOS;  // padding of the empty reference row (0 for bigG)
  int32_t bos = CLIPTokenizer::kBOS;
  int32_t eos = CLIPTokenizer::kEOS;
  bool project_pooled = true;  // apply text_projection when the encoder has one (bigG)
};

struct CLIPConditioning {
  HostTensor cond;    // [1, 77 * chunks, width] f32
  HostTensor pooled;  // [1, width or projection_dim] f32: the first chunk's pooled output
};

// All chunks run as one batch (plus the empty row [BOS, EOS, pad...] when any weight differs from
// 1); weighted tokens become (z - z_empty[j]) * w + z_empty[j]; chunks are concatenated on the
// token axis; pooled comes from the first chunk.
Result<CLIPConditioning> clip_text_encode(Executor& executor, WeightSet& weights,
                                          const CLIPTextConfig& config, const TokenChunks& chunks,
                                          const CLIPEncodeOptions& options);
// The same, the encoder running on `run_weights` (the store itself or a patched view of it,
// memory/patched_weights.h); the pooled projection reads `store` on the host.
Result<CLIPConditioning> clip_text_encode(Executor& executor, WeightSource& run_weights,
                                          const WeightSet& store, const CLIPTextConfig& config,
                                          const TokenChunks& chunks,
                                          const CLIPEncodeOptions& options);

// SDXL: cat(CLIP-L cond, bigG cond) on channels (cut to the shorter token count, as ComfyUI);
// the pooled output is bigG's.
Result<CLIPConditioning> clip_sdxl_combine(const CLIPConditioning& clip_l,
                                           const CLIPConditioning& clip_g);

}  // namespace hr
