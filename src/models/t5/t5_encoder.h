// The T5 v1.1 encoder (T5-XXL, Flux's and SD3's text encoder) as a graph: configuration read from
// a checkpoint's keys and shapes, the relative position buckets and the last hidden state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "memory/weight_set.h"
#include "models/safetensors.h"

namespace hr {

struct T5Config {
  int64_t vocab = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int heads = 64;
  int64_t d_ff = 10240;
  int layers = 24;
  int relative_attention_num_buckets = 32;
  int relative_attention_max_distance = 128;
  float eps = 1e-6f;
  // The feed-forward is always T5 v1.1's gated tanh GELU (ComfyUI's "gelu_pytorch_tanh" with
  // is_gated_act): wo(gelu_tanh(wi_0 x) * wi_1 x). Original T5's ReLU "wi" is refused.
  // umt5: every block has its own relative_attention_bias; T5: block 0's is shared by all.
  bool bias_per_layer = false;
  // fp8 weights and their scales (Note [fp8 weights] in graph/graph.h); null: none.
  std::shared_ptr<const WeightStorageMap> storage;
};

// The prefix in front of "encoder.final_layer_norm.weight" in a file ("" for a bare HF/ComfyUI
// t5xxl file, "text_encoders.t5xxl.transformer." in a combined checkpoint). NOT_FOUND when the
// file holds no T5 encoder.
Result<std::string> t5_encoder_prefix(const SafetensorsFile& file);

// Reads the configuration from a WeightSet loaded with the prefix stripped, or from a file's
// header under `prefix` (nothing loaded). Heads come from relative_attention_bias [buckets, H],
// d_kv from q.weight [H * d_kv, d_model]. Every tensor the graph reads is checked for presence
// and shape; INVALID_ARGUMENT names the first one missing or mis-shaped.
Result<T5Config> t5_encoder_detect(const WeightSet& weights);
Result<T5Config> t5_encoder_detect(const SafetensorsFile& file, std::string_view prefix);

// ComfyUI T5Attention._relative_position_bucket, bidirectional: the bucket of relative position
// `relative` = key position - query position (Note [T5 relative position buckets]).
int t5_relative_position_bucket(int64_t relative, int num_buckets = 32, int max_distance = 128);
// The [L, L] I64 table of buckets for query i (row) and key j (column): the graph input
// "relative_buckets".
HostTensor t5_relative_bucket_table(int64_t length, int num_buckets = 32, int max_distance = 128);

// The encoder for token ids "ids" (I64 [batch, tokens]) and the bucket table "relative_buckets"
// (I64 [tokens, tokens]); one output, the last hidden state after the final norm
// [batch, tokens, d_model] in `dtype`. Weights are declared in `dtype` (load them so); ComfyUI
// computes in F32 (Note [T5 precision] in t5_encoder.cpp). No attention mask: Flux's and SD3's
// T5 run unmasked (Note [T5 attention mask]).
Result<Graph> t5_encoder_graph(const T5Config& config, int64_t batch, int64_t tokens, DType dtype);

// Runs the encoder on equal-length token rows; returns the last hidden state [B, L, d_model] f32.
// INVALID_ARGUMENT for ragged rows or an id outside the vocabulary.
Result<HostTensor> t5_encoder_run(Executor& executor, WeightSource& weights, const T5Config& config,
                                  const std::vector<std::vector<int32_t>>& rows, DType dtype);

}  // namespace hr
