// The T5 v1.1 encoder graph: config detection, relative position buckets, the layer stack.
// Follows ComfyUI a125cd84 comfy/text_encoders/t5.py (T5, T5Stack, T5Block, T5Attention).
#include "models/t5/t5_encoder.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "models/layer_count.h"
#include "models/token_rows.h"

namespace hr {
namespace {

// Note [T5 precision]
// T5's activations are known to overflow float16 (HF transformers clamps its f16 hidden states for
// this reason). ComfyUI a125cd84 neither clamps nor special-cases f16 in
// comfy/text_encoders/t5.py; it avoids f16 activations altogether:
//  - sd1_clip.py:118: SDClipModel (base of sd3_clip.T5XXLModel, Flux's T5) builds the model on
//    comfy.ops.manual_cast, whose layers cast each weight to the input's dtype at use
//    (ops.py:61 cast_bias_weight: dtype = input.dtype);
//  - sd1_clip.py:204: process_tokens embeds with get_input_embeddings()(..., out_dtype=float32);
//  - sd1_clip.py:264: the transformer is called with dtype=torch.float32, and t5.py:147 takes the
//    position bias in x's dtype.
// So the residual stream, every matmul, the norms and the attention run in f32 whatever the
// file's dtype (f16, bf16 or fp8; t5.py:248 adds nan_to_num of the embeddings for fp8 files).
// Hence: run this graph with dtype F32 to match ComfyUI, with the weights loaded as F32 or kept
// in their 16-bit / fp8 storage and cast at use (T5Config::storage; Flux's component does the
// latter, Note [Flux text encoder precision] in models/flux/flux_text_encoder.cpp). F16 is
// accepted by the API but is not what ComfyUI does and overflows on T5-XXL (the golden of
// tests/data/flux/make_flux_te_golden.py has a T5 whose residual stream exceeds f16's range).

// Note [T5 attention mask]
// sd3_clip.py:11: T5XXLModel defaults to attention_mask=False, and flux.py's FluxClipModel builds
// it without one (SD3's t5_attention_mask option also defaults to False, sd3_clip.py:60), so
// enable_attention_masks is off: the T5 runs on all tokens of a chunk (256 for Flux, pads
// included) with no mask, and since zero_out_masked is off (sd1_clip.py:90) the conditioning is
// the whole last hidden state. T5Stack.forward then gets attention_mask=None (t5.py:205 builds a
// mask only otherwise) and the only additive term of the scores is the relative position bias.
// What reaches the conditioning: ClipTokenWeightEncoder.encode_token_weights (sd1_clip.py)
// concatenates the chunks' [1, 256, 4096] on the token axis; weighted tokens become
// (z - z_empty) * w + z_empty with z_empty from gen_empty_tokens ([EOS=1, pad=0, ...]); Flux's
// pooled output is CLIP-L's, not T5's.

// Note [T5 attention scale]
// T5 does not scale its scores by 1/sqrt(d_kv) (Mesh TensorFlow folds it into the init).
// ComfyUI's T5Attention.forward (t5.py:164) calls optimized_attention(q, k * sqrt(d_kv), v,
// heads, mask), cancelling the 1/sqrt(d_kv) that function applies; the graph computes q k^T
// unscaled.

struct Names {
  std::string block(int i) const { return "encoder.block." + std::to_string(i) + ".layer."; }
  std::string attn(int i, const char* w) const {
    return block(i) + "0.SelfAttention." + w + ".weight";
  }
  std::string bias(int i) const { return attn(i, "relative_attention_bias"); }
  std::string ln(int i, int sub) const {
    return block(i) + std::to_string(sub) + ".layer_norm.weight";
  }
  std::string ff(int i, const char* w) const {
    return block(i) + "1.DenseReluDense." + w + ".weight";
  }
};

using Find = std::function<std::optional<Shape>(const std::string&)>;

// Every tensor of the graph with its expected shape, in reading order.
std::vector<std::pair<std::string, Shape>> t5_tensors(const T5Config& c) {
  const Names n;
  const int64_t D = c.d_model, inner = c.d_kv * c.heads, F = c.d_ff;
  std::vector<std::pair<std::string, Shape>> t = {{"shared.weight", Shape{c.vocab, D}}};
  for (int i = 0; i < c.layers; ++i) {
    t.push_back({n.ln(i, 0), Shape{D}});
    for (const char* w : {"q", "k", "v"}) t.push_back({n.attn(i, w), Shape{inner, D}});
    t.push_back({n.attn(i, "o"), Shape{D, inner}});
    if (i == 0 || c.bias_per_layer)
      t.push_back({n.bias(i), Shape{int64_t(c.relative_attention_num_buckets), int64_t(c.heads)}});
    t.push_back({n.ln(i, 1), Shape{D}});
    t.push_back({n.ff(i, "wi_0"), Shape{F, D}});
    t.push_back({n.ff(i, "wi_1"), Shape{F, D}});
    t.push_back({n.ff(i, "wo"), Shape{D, F}});
  }
  t.push_back({"encoder.final_layer_norm.weight", Shape{D}});
  return t;
}

Result<T5Config> detect_from(const std::vector<std::string>& names, const Find& find) {
  const Names n;
  T5Config c;
  auto need2 = [&](const std::string& name) -> Result<Shape> {
    std::optional<Shape> s = find(name);
    if (!s) return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: '{}' is missing", name);
    if (s->rank != 2)
      return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: '{}' is {}, not 2-D", name,
                        s->str());
    return *s;
  };
  HR_ASSIGN_OR_RETURN(Shape shared, need2("shared.weight"));
  c.vocab = shared[0];
  c.d_model = shared[1];
  c.layers = numbered_layers(names, "encoder.block.");
  if (c.layers == 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: no 'encoder.block.N' tensors");
  HR_ASSIGN_OR_RETURN(Shape bias, need2(n.bias(0)));
  c.relative_attention_num_buckets = int(bias[0]);
  c.heads = int(bias[1]);
  c.bias_per_layer = c.layers > 1 && find(n.bias(1)).has_value();
  HR_ASSIGN_OR_RETURN(Shape q, need2(n.attn(0, "q")));
  if (c.heads < 1 || q[0] % c.heads != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: q {} does not split into {} heads",
                      q.str(), c.heads);
  c.d_kv = q[0] / c.heads;
  if (!find(n.ff(0, "wi_0")) && find(n.ff(0, "wi")))
    return make_error(ErrorCode::UNSUPPORTED,
                      "T5 encoder: '{}' without '{}': original T5's ReLU feed-forward is not "
                      "supported (T5 v1.1 / T5-XXL only)",
                      n.ff(0, "wi"), n.ff(0, "wi_0"));
  HR_ASSIGN_OR_RETURN(Shape wi, need2(n.ff(0, "wi_0")));
  c.d_ff = wi[0];
  for (const auto& [name, shape] : t5_tensors(c)) {
    std::optional<Shape> s = find(name);
    if (!s) return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: '{}' is missing", name);
    if (*s != shape)
      return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: '{}' is {}, expected {}", name,
                        s->str(), shape.str());
  }
  return c;
}

// Note [T5 embedding storage]
// With a storage map (weights kept in 16-bit or fp8 and cast to the compute dtype at use, as
// ComfyUI's manual_cast does) a weight's CAST makes a compute-dtype copy of the whole tensor; for
// T5-XXL's [32128, 4096] table that is 0.5 GB of f32 for a few hundred rows. An unscaled table is
// therefore gathered in its stored dtype and only the rows are cast: the same values, as
// ComfyUI's Embedding(..., out_dtype=float32) casts what it gathered. A scaled table takes the
// dequantizing CAST as every other weight.
ValueId embed(Graph& g, const T5Config& c, ValueId ids, DType dtype) {
  const std::string name = "shared.weight";
  const WeightStorage* s = nullptr;
  if (c.storage)
    if (auto it = c.storage->find(name); it != c.storage->end()) s = &it->second;
  if (!s || !s->scale.empty() || s->dtype == dtype)
    return g.op(OpKind::EMBEDDING, {}, {ids, g.weight(name, {dtype, {c.vocab, c.d_model}})},
                "shared");
  ValueId rows = g.op(OpKind::EMBEDDING, {}, {ids, g.weight(name, {s->dtype, {c.vocab, c.d_model}})},
                      "shared");
  return g.cast(rows, dtype, "shared.cast");
}

}  // namespace

Result<std::string> t5_encoder_prefix(const SafetensorsFile& file) {
  const std::string key = "encoder.final_layer_norm.weight";
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.size() < key.size() || e.name.compare(e.name.size() - key.size(), key.size(), key))
      continue;
    std::string prefix = e.name.substr(0, e.name.size() - key.size());
    if (file.find(prefix + "shared.weight")) return prefix;
  }
  return make_error(ErrorCode::NOT_FOUND,
                    "no T5 encoder in this file (no '[prefix]encoder.final_layer_norm.weight' "
                    "beside '[prefix]shared.weight')");
}

Result<T5Config> t5_encoder_detect(const WeightSet& w) {
  return detect_from(w.names(), [&w](const std::string& name) -> std::optional<Shape> {
    const HostTensor* t = w.find(name);
    return t ? std::optional<Shape>(t->shape()) : std::nullopt;
  });
}

Result<T5Config> t5_encoder_detect(const SafetensorsFile& file, std::string_view prefix) {
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0)
      names.push_back(e.name.substr(prefix.size()));
  return detect_from(names, [&](const std::string& name) -> std::optional<Shape> {
    const SafetensorsEntry* e = file.find(std::string(prefix) + name);
    return e ? std::optional<Shape>(e->shape) : std::nullopt;
  });
}

// Note [T5 relative position buckets]
// ComfyUI T5Attention._relative_position_bucket (from Mesh TensorFlow), bidirectional: half the
// buckets for keys after the query (relative > 0), half for the rest; in each half, distances
// below max_exact = buckets / 4 get their own bucket, larger ones
// max_exact + trunc(log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact)),
// capped at half - 1. torch computes the log term in float32 (n.float() / max_exact, then a
// float32 log, divided by the double log(max_distance / max_exact) and multiplied by the int,
// both taken as float32 scalars); so does this, so the truncation lands where torch's does.
int t5_relative_position_bucket(int64_t relative, int num_buckets, int max_distance) {
  const int half = num_buckets / 2;
  int bucket = relative > 0 ? half : 0;
  const int64_t n = relative < 0 ? -relative : relative;
  const int max_exact = half / 2;
  if (n < max_exact) return bucket + int(n);
  const float ratio = float(n) / float(max_exact);
  const float scale = float(std::log(double(max_distance) / double(max_exact)));
  const float large = std::log(ratio) / scale * float(half - max_exact);
  return bucket + std::min(max_exact + int(int64_t(large)), half - 1);
}

HostTensor t5_relative_bucket_table(int64_t length, int num_buckets, int max_distance) {
  HostTensor t(DType::I64, {length, length});
  auto* p = static_cast<int64_t*>(t.data());
  for (int64_t i = 0; i < length; ++i)
    for (int64_t j = 0; j < length; ++j)
      p[i * length + j] = t5_relative_position_bucket(j - i, num_buckets, max_distance);
  return t;
}

Result<Graph> t5_encoder_graph(const T5Config& c, int64_t B, int64_t L, DType dtype) {
  if (B < 1 || L < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "T5 encoder: batch {} x {} tokens", B, L);
  const Names n;
  const int64_t D = c.d_model, H = c.heads, K = c.d_kv, inner = H * K;
  Graph g;
  g.set_weight_storage(c.storage);
  auto W = [&](const std::string& name, Shape s) { return g.weight(name, {dtype, s}); };
  auto linear = [&](ValueId x, const std::string& name, int64_t out_f, int64_t in_f) {
    return g.linear(x, W(name, {out_f, in_f}), kNoValue, name);
  };
  auto norm = [&](ValueId x, const std::string& name) {
    return g.rms_norm(x, W(name, {D}), c.eps, name);
  };
  // [B, L, H*K] -> [B, H, L, K]
  auto heads = [&](ValueId x, const std::string& name) {
    return g.permute(g.reshape(x, {B, L, H, K}, name + ".split"), {0, 2, 1, 3}, name + ".heads");
  };
  // T5Attention.compute_bias: bias[0, h, i, j] = table[bucket(j - i), h].
  ValueId buckets = g.input("relative_buckets", {DType::I64, {L, L}});
  auto position_bias = [&](int i) {
    const std::string name = n.bias(i);
    ValueId v = g.op(OpKind::EMBEDDING, {},
                     {buckets, W(name, {c.relative_attention_num_buckets, H})}, name + ".lookup");
    return g.reshape(g.permute(v, {2, 0, 1}, name + ".hll"), {1, H, L, L}, name + ".bias");
  };

  ValueId ids = g.input("ids", {DType::I64, {B, L}});
  ValueId x = embed(g, c, ids, dtype);
  ValueId bias = kNoValue;
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = n.block(i);
    if (i == 0 || c.bias_per_layer) bias = position_bias(i);
    ValueId h = norm(x, n.ln(i, 0));
    ValueId q = heads(linear(h, n.attn(i, "q"), inner, D), p + "q");
    ValueId k = heads(linear(h, n.attn(i, "k"), inner, D), p + "k");
    ValueId v = heads(linear(h, n.attn(i, "v"), inner, D), p + "v");
    OpParams qk;
    qk.trans_b = true;  // Note [T5 attention scale]: no 1/sqrt(d_kv)
    ValueId s = g.add(g.op(OpKind::MATMUL, qk, {q, k}, p + "scores"), bias, p + "scores_bias");
    ValueId a =
        g.op(OpKind::MATMUL, {}, {g.op(OpKind::SOFTMAX, {}, {s}, p + "softmax"), v}, p + "attn");
    a = g.reshape(g.permute(a, {0, 2, 1, 3}, p + "attn.tokens"), {B, L, inner}, p + "attn.merge");
    x = g.add(x, linear(a, n.attn(i, "o"), D, inner), p + "attn_residual");

    h = norm(x, n.ln(i, 1));
    ValueId gate = g.unary(OpKind::GELU_TANH, linear(h, n.ff(i, "wi_0"), c.d_ff, D), p + "gelu");
    h = g.mul(gate, linear(h, n.ff(i, "wi_1"), c.d_ff, D), p + "gated");
    x = g.add(x, linear(h, n.ff(i, "wo"), D, c.d_ff), p + "ff_residual");
  }
  g.output(norm(x, "encoder.final_layer_norm.weight"), "last_hidden_state");
  if (!g.status().ok()) return g.status().with_context("building the T5 encoder graph");
  return g;
}

Result<HostTensor> t5_encoder_run(Executor& ex, WeightSource& weights, const T5Config& c,
                                  const std::vector<std::vector<int32_t>>& rows, DType dtype) {
  HR_ASSIGN_OR_RETURN(HostTensor ids, token_rows_tensor(rows, c.vocab, "T5 encoder"));
  const int64_t B = ids.shape()[0], L = ids.shape()[1];
  HostTensor buckets = t5_relative_bucket_table(L, c.relative_attention_num_buckets,
                                                c.relative_attention_max_distance);
  HR_ASSIGN_OR_RETURN(Graph g, t5_encoder_graph(c, B, L, dtype));
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs,
                      ex.run(g, {{"ids", &ids}, {"relative_buckets", &buckets}}, weights));
  HostTensor& out = outs[0];
  return out.dtype() == DType::F32 ? std::move(out) : out.to(DType::F32);
}

}  // namespace hr
