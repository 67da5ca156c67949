// Flux.1 DiT configuration detection and forward-pass graph (ComfyUI a125cd84
// comfy/ldm/flux/model.py Flux.forward_orig and layers.py blocks).
#include "models/flux/flux_dit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/dit_graph_builder.h"
#include "models/file_shapes.h"

namespace hr {

std::string FluxConfig::str() const {
  return fmt::format(
      "in {} out {}, hidden {}, {} heads, mlp_ratio {}, depth {} + {} single, axes_dim [{}], "
      "theta {}, context_in_dim {}, vec_in_dim {}, qkv_bias {}, guidance_embed {}",
      in_channels, out_channels, hidden_size, num_heads, mlp_ratio, depth, depth_single_blocks,
      fmt::join(axes_dim, ", "), theta, context_in_dim, vec_in_dim, qkv_bias, guidance_embed);
}

FluxConfig flux_config_dev() { return FluxConfig{}; }

FluxConfig flux_config_schnell() {
  FluxConfig c;
  c.guidance_embed = false;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Graph

namespace {

constexpr float kNormEps = 1e-6f;  // the LayerNorms (no affine) and the QK RMSNorms
constexpr int kTimeDim = 256;      // timestep_embedding(t, 256)
constexpr float kTimeFactor = 1000.0f;

class FluxBuilder : public DiTGraphBuilder {
 public:
  FluxBuilder(const FluxConfig& cfg, DType dtype) : DiTGraphBuilder(cfg.storage, dtype), c_(cfg) {}

  Status build(int64_t batch, int64_t h_tokens, int64_t w_tokens, int64_t txt_tokens);

 private:
  // MLPEmbedder: out_layer(silu(in_layer(x))).
  ValueId mlp_embedder(ValueId x, const std::string& name, int64_t in) {
    const int64_t h = c_.hidden_size;
    ValueId e = linear(x, name + ".in_layer", in, h);
    e = g.unary(OpKind::SILU, e, name + ".silu");
    return linear(e, name + ".out_layer", h, h);
  }
  // Flux's timestep_embedding(t * 1000, 256): [cos, sin] of t f_i, f_i = exp(-ln(1e4) i / 128).
  ValueId time_embedding(ValueId t, const std::string& name) {
    OpParams p;
    p.dim = kTimeDim;
    p.flip_sin_to_cos = true;
    p.freq_shift = 0.0f;
    p.max_period = 10000.0f;
    p.dtype = dt_;
    ValueId scaled = g.scale(t, kTimeFactor, 0.0f, name + ".time_factor");
    return g.op(OpKind::TIMESTEP_EMBEDDING, p, {scaled}, name);
  }
  // Modulation(vec): lin(silu(vec)) in `n` chunks of [B, 1, hidden] (shift, scale, gate, ...).
  std::vector<ValueId> modulation(const std::string& name, int n) {
    const int64_t h = c_.hidden_size;
    ValueId m = linear(vec_silu_, name, h, n * h);
    std::vector<ValueId> chunks;
    for (int i = 0; i < n; ++i) {
      std::string part = fmt::format("{}.chunk{}", name, i);
      ValueId s = g.slice(m, 1, i * h, (i + 1) * h, 1, part);
      chunks.push_back(g.reshape(s, Shape{batch_, 1, h}, part));
    }
    return chunks;
  }
  // apply_mod(LayerNorm(x), 1 + scale, shift): LayerNorm without affine (eps 1e-6) times
  // (1 + scale) plus shift, per sample. Note [one-sample modulation]: with one sample the
  // modulation is one row, so it is the LayerNorm's own affine (gamma 1 + scale, beta shift):
  // one pass over the tokens instead of three, rounded once instead of three times.
  ValueId norm_modulate(ValueId x, ValueId shift, ValueId scale, const std::string& name) {
    ValueId s1 = g.scale(scale, 1.0f, 1.0f, name + ".one_plus_scale");
    if (batch_ == 1) {
      const Shape row{c_.hidden_size};
      return g.layer_norm(x, g.reshape(s1, row, name + ".gamma"),
                          g.reshape(shift, row, name + ".beta"), kNormEps, name);
    }
    ValueId n = g.layer_norm(x, ones_, kNoValue, kNormEps, name);
    return g.add(g.mul(n, s1, name + ".scale"), shift, name + ".shift");
  }
  // x + gate * y.
  ValueId gated_add(ValueId x, ValueId gate, ValueId y, const std::string& name) {
    return g.add(x, g.mul(y, gate, name + ".gate"), name);
  }
  // One stream of a fused projection [B, L, >= 3 hidden] (q, k, v first) with its QK RMSNorm
  // `norm`.{query,key}_norm.scale, for QKV_ROPE (Note [fused qk norm and rope]).
  Graph::QkvStream qkv_stream(ValueId x, const std::string& norm) {
    const int64_t d = c_.head_dim();
    return {x, w(norm + ".query_norm.scale", {d}), w(norm + ".key_norm.scale", {d})};
  }
  // The streams' q and k normalised and rotated over the joint sequence (the table covers it),
  // then attention -> [B, L, hidden].
  ValueId joint_attention(std::span<const Graph::QkvStream> streams, const std::string& name) {
    ValueId qkv = g.qkv_rope(streams, pe_, c_.num_heads, int(c_.head_dim()), kNormEps, false,
                             name + ".qkv_rope");
    return g.attention_packed(qkv, c_.num_heads, name);
  }
  ValueId mlp(ValueId x, const std::string& name) {
    const int64_t h = c_.hidden_size, m = c_.mlp_hidden();
    x = linear(x, name + ".0", h, m);
    x = g.unary(OpKind::GELU_TANH, x, name + ".1");
    return linear(x, name + ".2", m, h);
  }

  void double_block(int i);
  void single_block(int i);
  ValueId final_layer(ValueId x);

  const FluxConfig& c_;
  int64_t batch_ = 1;
  int64_t txt_len_ = 0;
  ValueId img_ = kNoValue, txt_ = kNoValue, x_ = kNoValue;
  ValueId vec_silu_ = kNoValue, pe_ = kNoValue, ones_ = kNoValue;
};

// DoubleStreamBlock: each stream modulated and projected on its own, one joint attention over
// concat(txt, img), then each stream's proj and MLP with its gates.
void FluxBuilder::double_block(int i) {
  const std::string b = fmt::format("double_blocks.{}", i);
  const int64_t h = c_.hidden_size;
  std::vector<ValueId> im = modulation(b + ".img_mod.lin", 6);
  std::vector<ValueId> tm = modulation(b + ".txt_mod.lin", 6);
  ValueId in = norm_modulate(img_, im[0], im[1], b + ".img_norm1");
  ValueId tn = norm_modulate(txt_, tm[0], tm[1], b + ".txt_norm1");
  ValueId iqkv = linear(in, b + ".img_attn.qkv", h, 3 * h, c_.qkv_bias);
  ValueId tqkv = linear(tn, b + ".txt_attn.qkv", h, 3 * h, c_.qkv_bias);
  const Graph::QkvStream streams[] = {qkv_stream(tqkv, b + ".txt_attn.norm"),
                                      qkv_stream(iqkv, b + ".img_attn.norm")};
  ValueId a = joint_attention(streams, b + ".attn");
  const int64_t len = g.shape(a)[1];
  ValueId ta = g.slice(a, 1, 0, txt_len_, 1, b + ".txt_attn.out");
  ValueId ia = g.slice(a, 1, txt_len_, len, 1, b + ".img_attn.out");

  img_ = gated_add(img_, im[2], linear(ia, b + ".img_attn.proj", h, h), b + ".img_attn.residual");
  ValueId n2 = norm_modulate(img_, im[3], im[4], b + ".img_norm2");
  img_ = gated_add(img_, im[5], mlp(n2, b + ".img_mlp"), b + ".img_mlp.residual");

  txt_ = gated_add(txt_, tm[2], linear(ta, b + ".txt_attn.proj", h, h), b + ".txt_attn.residual");
  n2 = norm_modulate(txt_, tm[3], tm[4], b + ".txt_norm2");
  txt_ = gated_add(txt_, tm[5], mlp(n2, b + ".txt_mlp"), b + ".txt_mlp.residual");
}

// SingleStreamBlock: linear1 -> (qkv, mlp) in parallel, linear2 over concat(attn, gelu(mlp)).
void FluxBuilder::single_block(int i) {
  const std::string b = fmt::format("single_blocks.{}", i);
  const int64_t h = c_.hidden_size, m = c_.mlp_hidden();
  std::vector<ValueId> mod = modulation(b + ".modulation.lin", 3);
  ValueId n = norm_modulate(x_, mod[0], mod[1], b + ".pre_norm");
  ValueId l1 = linear(n, b + ".linear1", h, 3 * h + m);
  const Graph::QkvStream stream[] = {qkv_stream(l1, b + ".norm")};
  ValueId a = joint_attention(stream, b + ".attn");
  ValueId mh = g.slice(l1, 2, 3 * h, 3 * h + m, 1, b + ".mlp");
  mh = g.unary(OpKind::GELU_TANH, mh, b + ".mlp_act");
  ValueId cat = g.concat({a, mh}, 2, b + ".cat");
  ValueId out = linear(cat, b + ".linear2", h + m, h);
  x_ = gated_add(x_, mod[2], out, b + ".residual");
}

// LastLayer: adaLN_modulation (silu, linear) -> shift, scale; norm_final; linear.
ValueId FluxBuilder::final_layer(ValueId x) {
  const int64_t h = c_.hidden_size;
  ValueId m = linear(vec_silu_, "final_layer.adaLN_modulation.1", h, 2 * h);
  ValueId shift = g.reshape(g.slice(m, 1, 0, h, 1, "final_layer.shift"), Shape{batch_, 1, h},
                            "final_layer.shift");
  ValueId scale = g.reshape(g.slice(m, 1, h, 2 * h, 1, "final_layer.scale"), Shape{batch_, 1, h},
                            "final_layer.scale");
  x = norm_modulate(x, shift, scale, "final_layer.norm_final");
  return linear(x, "final_layer.linear", h, c_.out_channels);
}

Status FluxBuilder::build(int64_t batch, int64_t h_tokens, int64_t w_tokens,
                          int64_t txt_tokens) {
  const FluxConfig& c = c_;
  if (c.num_heads < 1 || c.hidden_size % c.num_heads || c.head_dim() % 2 || c.mlp_hidden() < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux config: hidden {} must split into {} heads of even width ({})",
                      c.hidden_size, c.num_heads, c.str());
  if (batch < 1 || h_tokens < 1 || w_tokens < 1 || txt_tokens < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux input: batch {}, {}x{} image tokens and {} text tokens must all be "
                      "positive", batch, h_tokens, w_tokens, txt_tokens);
  batch_ = batch;
  txt_len_ = txt_tokens;
  const int64_t h = c.hidden_size, img_len = h_tokens * w_tokens;
  ValueId img = g.input("img", TensorDesc{dt_, Shape{batch, img_len, c.in_channels}});
  ValueId txt = g.input("txt", TensorDesc{dt_, Shape{batch, txt_tokens, c.context_in_dim}});
  ValueId t = g.input("timesteps", TensorDesc{DType::F32, Shape{batch}});
  ValueId y = g.input("y", TensorDesc{dt_, Shape{batch, c.vec_in_dim}});
  ValueId guidance = kNoValue;
  if (c.guidance_embed) guidance = g.input("guidance", TensorDesc{DType::F32, Shape{batch}});
  pe_ = g.input("pe", TensorDesc{DType::F32, Shape{txt_tokens + img_len, c.head_dim() / 2, 2}});

  img_ = linear(img, "img_in", c.in_channels, h);
  // Note [flux layer norm]
  // Flux's LayerNorms have no affine parameters; LAYER_NORM takes a gamma, so the graph makes a
  // vector of ones from a weight of width hidden (0 * img_in.bias + 1) and passes that, unless
  // one sample folds the modulation into it (Note [one-sample modulation]).
  if (batch > 1) ones_ = g.scale(w("img_in.bias", {h}), 0.0f, 1.0f, "layer_norm_ones");
  ValueId vec = mlp_embedder(time_embedding(t, "time_in.timestep_embedding"), "time_in", kTimeDim);
  if (c.guidance_embed)
    vec = g.add(vec, mlp_embedder(time_embedding(guidance, "guidance_in.timestep_embedding"),
                                  "guidance_in", kTimeDim), "vec.guidance");
  vec = g.add(vec, mlp_embedder(y, "vector_in", c.vec_in_dim), "vec");
  // Every Modulation and the final adaLN start with silu(vec): computed once.
  vec_silu_ = g.unary(OpKind::SILU, vec, "vec.silu");
  txt_ = linear(txt, "txt_in", c.context_in_dim, h);

  for (int i = 0; i < c.depth; ++i) double_block(i);
  x_ = g.concat({txt_, img_}, 1, "single_blocks.input");
  for (int i = 0; i < c.depth_single_blocks; ++i) single_block(i);
  ValueId out = g.slice(x_, 1, txt_tokens, txt_tokens + img_len, 1, "single_blocks.img");
  g.output(final_layer(out), "out");
  if (!g.status().ok()) return g.status().with_context("building the Flux graph");
  return Status();
}

}  // namespace

Result<Graph> flux_dit_graph(const FluxConfig& cfg, int64_t batch, int64_t h_tokens,
                             int64_t w_tokens, int64_t txt_tokens, DType dtype) {
  FluxBuilder b(cfg, dtype);
  HR_TRY(b.build(batch, h_tokens, w_tokens, txt_tokens));
  return std::move(b.g);
}


// ---------------------------------------------------------------------------------------------
// Detection

namespace {


// Every weight the graph declares, against the file's names and shapes.
Status check_weights(const FluxConfig& cfg, const SafetensorsFile& file, std::string_view prefix) {
  HR_ASSIGN_OR_RETURN(Graph g, flux_dit_graph(cfg, 1, 1, 1, 1, DType::F32));
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::WEIGHT) continue;
    const std::string full = std::string(prefix) + v.name;
    const SafetensorsEntry* e = file.find(full);
    if (!e)
      return make_error(ErrorCode::NOT_FOUND, "{}: Flux tensor '{}' is missing", file.path(), full);
    if (e->shape != v.desc.shape)
      return make_error(ErrorCode::CORRUPT, "{}: Flux tensor '{}' has shape {}, expected {} ({})",
                        file.path(), full, e->shape.str(), v.desc.shape.str(), cfg.str());
  }
  return Status();
}

}  // namespace

Result<FluxConfig> flux_config_detect(const SafetensorsFile& file, std::string_view prefix) {
  FileShapes r(file, prefix, "Flux");
  FluxConfig c;
  HR_ASSIGN_OR_RETURN(Shape img_in, r.need("img_in.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape txt_in, r.need("txt_in.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape vec_in, r.need("vector_in.in_layer.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape out, r.need("final_layer.linear.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape qk, r.need("double_blocks.0.img_attn.norm.query_norm.scale", 1));
  HR_ASSIGN_OR_RETURN(Shape mlp, r.need("double_blocks.0.img_mlp.0.weight", 2));
  c.hidden_size = int(img_in[0]);
  c.in_channels = int(img_in[1]);
  c.context_in_dim = int(txt_in[1]);
  c.vec_in_dim = int(vec_in[1]);
  c.out_channels = int(out[0]);
  if (qk[0] < 2 || c.hidden_size % qk[0])
    return make_error(ErrorCode::CORRUPT, "{}: Flux QK norm width {} does not divide hidden {}",
                      file.path(), qk[0], c.hidden_size);
  c.num_heads = int(c.hidden_size / qk[0]);
  c.mlp_ratio = float(mlp[0]) / float(c.hidden_size);
  c.depth = r.count("double_blocks.{}.img_attn.qkv.weight");
  c.depth_single_blocks = r.count("single_blocks.{}.linear1.weight");
  c.qkv_bias = r.find("double_blocks.0.img_attn.qkv.bias") != nullptr;
  c.guidance_embed = r.find("guidance_in.in_layer.weight") != nullptr;
  // Flux's axes fit its head width (128) only; other widths are no Flux ComfyUI loads.
  if (c.axes_dim[0] + c.axes_dim[1] + c.axes_dim[2] != c.head_dim()) c.axes_dim.clear();
  HR_TRY(check_weights(c, file, prefix));
  return c;
}

}  // namespace hr
