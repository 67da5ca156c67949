// A decoder-only LLM (Qwen3 / Qwen2.5 / Llama shapes, models/llm/llm_config.h) as a text encoder
// graph: causal self-attention over the prompt, one chosen hidden state out.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "models/llm/llm_config.h"

namespace hr {

// The rotation table for positions 0 .. tokens-1 (models/rope_table.h rope_table_llama): the
// graph input "rope", f32 [tokens, head_dim / 2, 2].
Result<HostTensor> llm_rope_table(const LLMConfig& config, int64_t tokens);

// The encoder for token ids "ids" (I64 [batch, tokens]) and "rope" (llm_rope_table): embeddings,
// then as many pre-norm blocks as the chosen hidden state needs (Note [LLM hidden state]), each
// x += o(attn(rope(qnorm(q(n1 x))), rope(knorm(k(n1 x))), v(n1 x))) causal with grouped-query
// heads, x += down(silu(gate(n2 x)) * up(n2 x)). One output "hidden_state" [batch, tokens,
// hidden] in `dtype`; weights are declared in `dtype` (or their stored dtype, config.storage).
// ComfyUI computes in F32 (Note [LLM encoder precision] in llm_encoder.cpp). No padding mask:
// every token is real (Z-Image keeps only the prompt's tokens).
Result<Graph> llm_encoder_graph(const LLMConfig& config, int64_t batch, int64_t tokens,
                                DType dtype);

// Runs the encoder on equal-length token rows (batch 1 in Z-Image); returns the chosen hidden
// state [B, L, hidden] f32. INVALID_ARGUMENT for no tokens, ragged rows or an id outside the
// vocabulary.
Result<HostTensor> llm_encoder_run(Executor& executor, WeightSource& weights,
                                   const LLMConfig& config,
                                   const std::vector<std::vector<int32_t>>& rows, DType dtype);

}  // namespace hr
