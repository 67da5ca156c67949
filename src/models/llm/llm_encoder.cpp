// The decoder-only LLM text-encoder graph and its run. Follows ComfyUI a125cd84
// comfy/text_encoders/llama.py (Llama2_, TransformerBlock, Attention, MLP, precompute_freqs_cis,
// apply_rope), which transformers' Qwen3Model / Qwen2Model compute the same way.
#include "models/llm/llm_encoder.h"

#include <string>

#include "models/rope_table.h"
#include "models/token_rows.h"

namespace hr {
namespace {

// Note [LLM encoder precision]
// As for T5 (Note [T5 precision] in models/t5/t5_encoder.cpp): ComfyUI's SDClipModel, which
// every LLM text encoder of ComfyUI subclasses (lumina2.py, qwen_image.py, ...), builds it on
// comfy.ops.manual_cast, embeds with out_dtype=float32 and calls the transformer with
// dtype=torch.float32, so the residual stream, the matmuls (weights cast to f32 at use), the
// norms, RoPE and the attention run in f32 whatever the file's dtype. Run this graph with dtype
// F32 to match, with f32-loaded weights or with config.storage (weights kept in their 16-bit /
// fp8 storage and cast at use).

// Note [grouped-query attention]
// ATTENTION has one head count for q, k and v; the model has kv_heads < heads. ComfyUI repeats
// K and V per head with repeat_interleave(heads / kv_heads, dim=1) on [B, H_kv, L, D]: query head
// h reads kv head h / rep. The graph does the same on token-major tensors: [B, L, H_kv * D]
// reshaped to [B, L, H_kv, 1, D], rep copies CONCATenated on axis 3 (-> [B, L, H_kv, rep, D],
// head h = j * rep + r reading kv head j), reshaped to [B, L, H * D]. It costs two
// [B, L, H * D] activations per layer, small next to the weights at prompt lengths (Qwen3-4B,
// 512 tokens: 4 MiB each in f32); the attention kernels stay as they are.

std::string layer(int i) { return "model.layers." + std::to_string(i) + "."; }

// Note [T5 embedding storage] in models/t5/t5_encoder.cpp: with stored 16-bit weights the table
// is gathered in its stored dtype and only the rows are cast (Qwen3's [151936, 2560] table would
// be 1.5 GiB as f32). ComfyUI's Embedding(..., out_dtype=float32) casts what it gathered too.
ValueId embed(Graph& g, const LLMConfig& c, ValueId ids, DType dtype) {
  const std::string name = "model.embed_tokens.weight";
  const WeightStorage* s = nullptr;
  if (c.storage)
    if (auto it = c.storage->find(name); it != c.storage->end()) s = &it->second;
  if (!s || !s->scale.empty() || s->dtype == dtype)
    return g.op(OpKind::EMBEDDING, {}, {ids, g.weight(name, {dtype, {c.vocab, c.hidden}})},
                "embed_tokens");
  ValueId rows = g.op(OpKind::EMBEDDING, {}, {ids, g.weight(name, {s->dtype, {c.vocab, c.hidden}})},
                      "embed_tokens");
  return g.cast(rows, dtype, "embed_tokens.cast");
}

class Builder {
 public:
  Builder(Graph& g, const LLMConfig& c, int64_t B, int64_t L, DType dtype)
      : g_(g), c_(c), B_(B), L_(L), dtype_(dtype) {}

  ValueId block(ValueId x, ValueId cs, int i) {
    const std::string p = layer(i);
    ValueId h = norm(x, p + "input_layernorm.weight", c_.hidden);
    x = g_.add(x, attention(h, cs, p), p + "attn_residual");
    h = norm(x, p + "post_attention_layernorm.weight", c_.hidden);
    return g_.add(x, mlp(h, p + "mlp."), p + "mlp_residual");
  }

  ValueId norm(ValueId x, const std::string& name, int64_t width) {
    return g_.rms_norm(x, W(name, {width}), c_.rms_eps, name);
  }

 private:
  ValueId W(const std::string& name, Shape s) { return g_.weight(name, {dtype_, s}); }

  ValueId linear(ValueId x, const std::string& name, int64_t out_f, int64_t in_f, bool bias) {
    ValueId b = bias ? W(name + ".bias", {out_f}) : kNoValue;
    return g_.linear(x, W(name + ".weight", {out_f, in_f}), b, name);
  }

  // q or k of `heads` heads: projected, per-head RMS norm (Qwen3's q_norm / k_norm), rotated
  // (rotate_half pairs), back to [B, L, heads * D].
  ValueId rotated(ValueId h, ValueId cs, const std::string& p, const char* proj, const char* qn,
                  int heads) {
    const int64_t D = c_.head_dim, width = heads * D;
    ValueId x = linear(h, p + "self_attn." + proj, width, c_.hidden, c_.qkv_bias);
    x = g_.reshape(x, {B_, L_, heads, D}, p + proj + ".heads");
    if (c_.qk_norm) x = norm(x, p + "self_attn." + qn + ".weight", D);
    x = g_.rope(x, cs, /*half_split=*/true, p + proj + ".rope");
    return g_.reshape(x, {B_, L_, width}, p + proj + ".merge");
  }

  // Note [grouped-query attention]
  ValueId repeat_kv(ValueId x, const std::string& name) {
    const int rep = c_.heads / c_.kv_heads;
    if (rep == 1) return x;
    const int64_t D = c_.head_dim;
    x = g_.reshape(x, {B_, L_, c_.kv_heads, 1, D}, name + ".split");
    x = g_.concat(std::vector<ValueId>(size_t(rep), x), 3, name + ".repeat");
    return g_.reshape(x, {B_, L_, int64_t(c_.heads) * D}, name + ".merge");
  }

  ValueId attention(ValueId h, ValueId cs, const std::string& p) {
    const int64_t inner = c_.heads * c_.head_dim, kv = c_.kv_heads * c_.head_dim;
    ValueId q = rotated(h, cs, p, "q_proj", "q_norm", c_.heads);
    ValueId k = repeat_kv(rotated(h, cs, p, "k_proj", "k_norm", c_.kv_heads), p + "k");
    ValueId v = linear(h, p + "self_attn.v_proj", kv, c_.hidden, c_.qkv_bias);
    v = repeat_kv(v, p + "v");
    ValueId a = g_.attention(q, k, v, c_.heads, /*causal=*/true, p + "attn");
    return linear(a, p + "self_attn.o_proj", c_.hidden, inner, false);
  }

  ValueId mlp(ValueId h, const std::string& p) {
    const int64_t F = c_.intermediate, D = c_.hidden;
    ValueId gate = g_.unary(OpKind::SILU, linear(h, p + "gate_proj", F, D, false), p + "silu");
    ValueId up = linear(h, p + "up_proj", F, D, false);
    return linear(g_.mul(gate, up, p + "gated"), p + "down_proj", D, F, false);
  }

  Graph& g_;
  const LLMConfig& c_;
  const int64_t B_, L_;
  const DType dtype_;
};

}  // namespace

Result<HostTensor> llm_rope_table(const LLMConfig& c, int64_t tokens) {
  std::vector<float> positions(size_t(tokens > 0 ? tokens : 0));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = float(i);
  return rope_table_llama(positions, int(c.head_dim), c.rope_theta);
}

Result<Graph> llm_encoder_graph(const LLMConfig& c, int64_t B, int64_t L, DType dtype) {
  if (B < 1 || L < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: batch {} x {} tokens", B, L);
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0 || c.head_dim % 2 != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "LLM encoder: {} heads, {} kv heads of {} do not make attention heads",
                      c.heads, c.kv_heads, c.head_dim);
  HR_ASSIGN_OR_RETURN(int out_index, llm_output_index(c));
  Graph g;
  g.set_weight_storage(c.storage);
  Builder b(g, c, B, L, dtype);
  ValueId ids = g.input("ids", {DType::I64, {B, L}});
  ValueId cs = g.input("rope", {DType::F32, {L, c.head_dim / 2, 2}});
  ValueId x = embed(g, c, ids, dtype);
  // Note [LLM hidden state]: hidden_states[i] is the input of layer i; only those layers run.
  for (int i = 0; i < out_index; ++i) x = b.block(x, cs, i);
  if (out_index == c.layers || c.output_norm) x = b.norm(x, "model.norm.weight", c.hidden);
  g.output(x, "hidden_state");
  if (!g.status().ok()) return g.status().with_context("building the LLM encoder graph");
  return g;
}

Result<HostTensor> llm_encoder_run(Executor& ex, WeightSource& weights, const LLMConfig& c,
                                   const std::vector<std::vector<int32_t>>& rows, DType dtype) {
  HR_ASSIGN_OR_RETURN(HostTensor ids, token_rows_tensor(rows, c.vocab, "LLM encoder"));
  const int64_t B = ids.shape()[0], L = ids.shape()[1];
  HR_ASSIGN_OR_RETURN(HostTensor cs, llm_rope_table(c, L));
  HR_ASSIGN_OR_RETURN(Graph g, llm_encoder_graph(c, B, L, dtype));
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs,
                      ex.run(g, {{"ids", &ids}, {"rope", &cs}}, weights));
  HostTensor& out = outs[0];
  return out.dtype() == DType::F32 ? std::move(out) : out.to(DType::F32);
}

}  // namespace hr
