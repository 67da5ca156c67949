// Z-Image DiT forward-pass graph (diffusers transformer_z_image.py ZImageTransformer2DModel.forward
// and ZImageTransformerBlock; ComfyUI's NextDiT with z_image_modulation computes the same) and one
// call on host tensors.
#include "models/zimage/zimage_dit.h"

#include <fmt/format.h>

#include <cstring>

#include "graph/graph_cache.h"
#include "models/dit_graph_builder.h"
#include "models/latent_crop.h"

namespace hr {

// Note [z-image time and sign]
// diffusers' Z-Image pipeline calls the transformer with t = (1000 - timestep) / 1000 where the
// flow-match scheduler's timestep is 1000 sigma, so t = 1 - sigma, embeds t * t_scale (1000), and
// steps with noise_pred = -output (prev = x + (sigma_next - sigma) noise_pred). ComfyUI's
// NextDiT._forward does both itself: t = 1 - timesteps, t_embedder(t * time_scale), return -img;
// ModelSamplingAuraFlow is CONST flow matching with multiplier 1, so the timestep it passes is
// sigma and denoised = x - sigma * output. headroom's graph takes sigma and returns ComfyUI's
// output: 1 - sigma and the negation are nodes of the graph, rounded as torch rounds them.

namespace {

constexpr int kTimeDim = 256;           // TimestepEmbedder frequency_embedding_size
constexpr float kFinalNormEps = 1e-6f;  // FinalLayer's LayerNorm (no affine)

class ZImageBuilder : public DiTGraphBuilder {
 public:
  ZImageBuilder(const ZImageConfig& cfg, DType dtype) : DiTGraphBuilder(cfg.storage, dtype), c_(cfg) {}

  Status build(int64_t batch, int64_t h_tokens, int64_t w_tokens, int64_t cap_tokens);

 private:
  // ComfyUI / diffusers timestep_embedding((1 - sigma) * t_scale, 256): [cos, sin] of t f_i,
  // f_i = exp(-ln(1e4) i / 128); then t_embedder.mlp (Linear, SiLU, Linear).
  ValueId time_embedding(ValueId sigma) {
    ValueId t = g.scale(sigma, -1.0f, 1.0f, "t_embedder.one_minus_sigma");
    t = g.scale(t, c_.t_scale, 0.0f, "t_embedder.t_scale");
    OpParams p;
    p.dim = kTimeDim;
    p.flip_sin_to_cos = true;
    p.freq_shift = 0.0f;
    p.max_period = 10000.0f;
    p.dtype = dt_;
    ValueId e = g.op(OpKind::TIMESTEP_EMBEDDING, p, {t}, "t_embedder.timestep_embedding");
    e = linear(e, "t_embedder.mlp.0", kTimeDim, c_.t_hidden, true);
    e = g.unary(OpKind::SILU, e, "t_embedder.mlp.1");
    return linear(e, "t_embedder.mlp.2", c_.t_hidden, c_.adaln_dim, true);
  }
  // `seq` [B, L, dim] followed by `pad` copies of the [1, dim] pad token `name`.
  ValueId append_pad(ValueId seq, const std::string& name, int64_t pad) {
    if (pad == 0) return seq;
    ValueId tok = g.reshape(w(name, {1, c_.dim}), Shape{1, 1, c_.dim}, name + ".row");
    ValueId rows =
        pad == 1 ? tok : g.concat(std::vector<ValueId>(size_t(pad), tok), 1, name + ".rows");
    if (batch_ > 1) rows = g.concat(std::vector<ValueId>(size_t(batch_), rows), 0, name + ".batch");
    return g.concat({seq, rows}, 1, name + ".padded");
  }
  // RMSNorm(x) * weight, times the per-sample modulation `scale` [B, 1, dim] when given. Note
  // [one-sample modulation] in flux_dit.cpp: with one sample the scale is one row, folded into
  // the norm's weight.
  ValueId rms_norm(ValueId x, const std::string& name, ValueId scale = kNoValue) {
    ValueId wt = w(name + ".weight", {c_.dim});
    if (scale == kNoValue) return g.rms_norm(x, wt, c_.norm_eps, name);
    if (batch_ == 1)
      return g.rms_norm(
          x,
          g.mul(wt, g.reshape(scale, Shape{c_.dim}, name + ".scale_row"), name + ".scaled_weight"),
          c_.norm_eps, name);
    return g.mul(g.rms_norm(x, wt, c_.norm_eps, name), scale, name + ".modulate");
  }
  // attention.qkv (no bias) -> QK RMSNorm + RoPE -> attention -> attention.out (no bias).
  ValueId attention(ValueId x, ValueId pe, const std::string& b) {
    const int64_t d = c_.dim, hd = c_.head_dim();
    ValueId qkv = linear(x, b + ".attention.qkv", d, 3 * d, false);
    const Graph::QkvStream stream[] = {
        {qkv, w(b + ".attention.q_norm.weight", {hd}), w(b + ".attention.k_norm.weight", {hd})}};
    ValueId r = g.qkv_rope(stream, pe, c_.n_heads, int(hd), c_.qk_norm_eps, false,
                           b + ".attention.qkv_rope");
    ValueId a = g.attention_packed(r, c_.n_heads, b + ".attention");
    return linear(a, b + ".attention.out", d, d, false);
  }
  // FeedForward: w2(silu(w1 x) * w3 x), no biases.
  ValueId feed_forward(ValueId x, const std::string& b) {
    const int64_t d = c_.dim, f = c_.ffn_hidden;
    ValueId a = g.unary(OpKind::SILU, linear(x, b + ".w1", d, f, false), b + ".silu");
    ValueId gate = g.mul(a, linear(x, b + ".w3", d, f, false), b + ".gate");
    return linear(gate, b + ".w2", f, d, false);
  }
  // adaLN_modulation.0 (a bare Linear on the timestep embedding) in four [B, 1, dim] chunks:
  // scale_msa, gate_msa, scale_mlp, gate_mlp, as 1 + scale and tanh(gate).
  std::vector<ValueId> modulation(const std::string& b) {
    const int64_t d = c_.dim;
    ValueId m = linear(adaln_, b + ".adaLN_modulation.0", c_.adaln_dim, 4 * d, true);
    std::vector<ValueId> out;
    for (int i = 0; i < 4; ++i) {
      const std::string part = fmt::format("{}.adaLN_modulation.chunk{}", b, i);
      ValueId s = g.reshape(g.slice(m, 1, i * d, (i + 1) * d, 1, part), Shape{batch_, 1, d}, part);
      out.push_back(i % 2 == 0 ? g.scale(s, 1.0f, 1.0f, part + ".one_plus")
                               : g.unary(OpKind::TANH, s, part + ".tanh"));
    }
    return out;
  }

  ValueId block(ValueId x, ValueId pe, const std::string& b, bool modulated);
  ValueId final_layer(ValueId x);

  const ZImageConfig& c_;
  int64_t batch_ = 1;
  ValueId adaln_ = kNoValue;
};

// ZImageTransformerBlock: sandwich RMSNorms around attention and the FFN; the modulated form
// scales the pre-norms by 1 + scale and gates the branches with tanh(gate).
ValueId ZImageBuilder::block(ValueId x, ValueId pe, const std::string& b, bool modulated) {
  std::vector<ValueId> mod = modulated ? modulation(b) : std::vector<ValueId>(4, kNoValue);
  ValueId a = attention(rms_norm(x, b + ".attention_norm1", mod[0]), pe, b);
  a = rms_norm(a, b + ".attention_norm2");
  if (modulated) a = g.mul(a, mod[1], b + ".attention.gated");
  x = g.add(x, a, b + ".attention.residual");
  ValueId f = feed_forward(rms_norm(x, b + ".ffn_norm1", mod[2]), b + ".feed_forward");
  f = rms_norm(f, b + ".ffn_norm2");
  if (modulated) f = g.mul(f, mod[3], b + ".feed_forward.gated");
  return g.add(x, f, b + ".feed_forward.residual");
}

// FinalLayer: LayerNorm (no affine, eps 1e-6) times 1 + adaLN_modulation(silu(c)), then linear.
ValueId ZImageBuilder::final_layer(ValueId x) {
  const int64_t d = c_.dim;
  ValueId c = g.unary(OpKind::SILU, adaln_, "final_layer.adaLN_modulation.0");
  ValueId s = linear(c, "final_layer.adaLN_modulation.1", c_.adaln_dim, d, true);
  s = g.scale(s, 1.0f, 1.0f, "final_layer.one_plus_scale");
  if (batch_ == 1) {  // Note [one-sample modulation]: the scale is the LayerNorm's gamma
    x = g.layer_norm(x, g.reshape(s, Shape{d}, "final_layer.gamma"), kNoValue, kFinalNormEps,
                     "final_layer.norm_final");
  } else {
    // Note [flux layer norm]: ones for LAYER_NORM's gamma from a weight of width dim.
    ValueId ones = g.scale(w("x_embedder.bias", {d}), 0.0f, 1.0f, "final_layer.ones");
    x = g.layer_norm(x, ones, kNoValue, kFinalNormEps, "final_layer.norm_final");
    x = g.mul(x, g.reshape(s, Shape{batch_, 1, d}, "final_layer.scale"), "final_layer.modulate");
  }
  return linear(x, "final_layer.linear", d, c_.patch_width(), true);
}

Status ZImageBuilder::build(int64_t batch, int64_t h_tokens, int64_t w_tokens, int64_t cap_tokens) {
  const ZImageConfig& c = c_;
  if (c.n_heads < 1 || c.dim % c.n_heads || c.head_dim() % 2 || c.ffn_hidden < 1 ||
      c.adaln_dim < 1 || c.t_hidden < 1 || c.pad_multiple < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Z-Image config: dim {} must split into {} heads of even width, and the "
                      "widths must be positive ({})",
                      c.dim, c.n_heads, c.str());
  if (batch < 1 || h_tokens < 1 || w_tokens < 1 || cap_tokens < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Z-Image input: batch {}, {}x{} image tokens and {} caption tokens must all "
                      "be positive",
                      batch, h_tokens, w_tokens, cap_tokens);
  batch_ = batch;
  const int64_t d = c.dim, img_len = h_tokens * w_tokens;
  const int64_t lc = zimage_padded_len(cap_tokens, c.pad_multiple);
  const int64_t li = zimage_padded_len(img_len, c.pad_multiple);
  ValueId img = g.input("img", TensorDesc{dt_, Shape{batch, img_len, c.patch_width()}});
  ValueId ctx = g.input("context", TensorDesc{dt_, Shape{batch, cap_tokens, c.cap_feat_dim}});
  ValueId sigma = g.input("sigma", TensorDesc{DType::F32, Shape{batch}});
  ValueId pe = g.input("pe", TensorDesc{DType::F32, Shape{lc + li, c.head_dim() / 2, 2}});
  ValueId pe_cap = g.slice(pe, 0, 0, lc, 1, "pe.caption");
  ValueId pe_img = g.slice(pe, 0, lc, lc + li, 1, "pe.image");

  adaln_ = time_embedding(sigma);
  // Image tokens: embed, pad, noise_refiner (modulated).
  ValueId x = linear(img, "x_embedder", c.patch_width(), d, true);
  x = append_pad(x, "x_pad_token", li - img_len);
  for (int i = 0; i < c.n_refiner_layers; ++i)
    x = block(x, pe_img, fmt::format("noise_refiner.{}", i), true);
  // Caption tokens: RMSNorm + Linear, pad, context_refiner (not modulated).
  ValueId cap =
      g.rms_norm(ctx, w("cap_embedder.0.weight", {c.cap_feat_dim}), c.norm_eps, "cap_embedder.0");
  cap = linear(cap, "cap_embedder.1", c.cap_feat_dim, d, true);
  cap = append_pad(cap, "cap_pad_token", lc - cap_tokens);
  for (int i = 0; i < c.n_refiner_layers; ++i)
    cap = block(cap, pe_cap, fmt::format("context_refiner.{}", i), false);
  // Note [z-image positions]: caption first, as ComfyUI joins them.
  ValueId u = g.concat({cap, x}, 1, "layers.input");
  for (int i = 0; i < c.n_layers; ++i) u = block(u, pe, fmt::format("layers.{}", i), true);
  u = g.slice(u, 1, lc, lc + img_len, 1, "layers.image");
  ValueId out = final_layer(u);
  g.output(g.scale(out, -1.0f, 0.0f, "out.negate"), "out");  // Note [z-image time and sign]
  if (!g.status().ok()) return g.status().with_context("building the Z-Image graph");
  return Status();
}

// Note [graph reuse] in graph/graph_cache.cpp.
Result<std::shared_ptr<const Graph>> zimage_graph_shared(const ZImageConfig& cfg, int64_t batch,
                                                         int64_t h_tokens, int64_t w_tokens,
                                                         int64_t cap_tokens, DType dtype) {
  static GraphCache cache;
  const std::string key = fmt::format("{}|{}|{}x{}x{}|{}|{}", cfg.str(), cfg.storage_key, batch,
                                      h_tokens, w_tokens, cap_tokens, dtype_name(dtype));
  return cache.get(
      key, [&] { return zimage_dit_graph(cfg, batch, h_tokens, w_tokens, cap_tokens, dtype); });
}

Status inputs_check(const ZImageConfig& cfg, const ZImageInputs& in) {
  if (!in.x || !in.sigma || !in.context)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_dit_run: x, sigma and context are needed");
  const Shape &x = in.x->shape(), &t = in.sigma->shape(), &ctx = in.context->shape();
  const int64_t b = x.rank == 4 ? x[0] : -1;
  if (x.rank != 4 || in.x->dtype() != DType::F32 || x[1] != cfg.in_channels || t.rank != 1 ||
      t[0] != b || in.sigma->dtype() != DType::F32 || ctx.rank != 3 || ctx[0] != b || ctx[1] < 1 ||
      ctx[2] != cfg.cap_feat_dim || in.context->dtype() != DType::F32)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_dit_run: x {} must be f32 [B, {}, H, W], sigma {} f32 [B], context "
                      "{} f32 [B, L, {}]",
                      in.x->desc().str(), cfg.in_channels, in.sigma->desc().str(),
                      in.context->desc().str(), cfg.cap_feat_dim);
  if (cfg.axes_dim.size() != 3)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "zimage_dit_run: no RoPE axes for head width {} (Z-Image's are 32/48/48 for "
                      "128)",
                      cfg.head_dim());
  return Status();
}

}  // namespace

Result<Graph> zimage_dit_graph(const ZImageConfig& cfg, int64_t batch, int64_t h_tokens,
                               int64_t w_tokens, int64_t cap_tokens, DType dtype) {
  ZImageBuilder b(cfg, dtype);
  HR_TRY(b.build(batch, h_tokens, w_tokens, cap_tokens));
  return std::move(b.g);
}

Result<HostTensor> zimage_dit_run(Executor& ex, const ZImageConfig& cfg, WeightSource& weights,
                                  DType dtype, const ZImageInputs& in) {
  HR_TRY(inputs_check(cfg, in));
  const Shape& xs = in.x->shape();
  const int64_t b = xs[0], h = xs[2], w = xs[3];
  const int64_t ht = (h + 1) / 2, wt = (w + 1) / 2, cap_len = in.context->shape()[1];
  HR_ASSIGN_OR_RETURN(HostTensor img, zimage_patchify(*in.x));
  HR_ASSIGN_OR_RETURN(HostTensor pe, zimage_pe_table(cap_len, ht, wt, cfg.pad_multiple,
                                                     cfg.axes_dim, cfg.rope_theta));
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> g,
                      zimage_graph_shared(cfg, b, ht, wt, cap_len, dtype));
  HostTensor ic, cc;
  if (dtype != DType::F32) {
    ic = img.to(dtype);
    cc = in.context->to(dtype);
  }
  HostInputs inputs = {{"img", dtype == DType::F32 ? &img : &ic},
                       {"context", dtype == DType::F32 ? in.context : &cc},
                       {"sigma", in.sigma},
                       {"pe", &pe}};
  weights.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, ex.run(*g, inputs, weights));
  if (outs.size() != 1)
    return make_error(ErrorCode::INTERNAL, "Z-Image graph returned {} outputs", outs.size());
  HostTensor tokens = outs[0].dtype() == DType::F32 ? std::move(outs[0]) : outs[0].to(DType::F32);
  HR_ASSIGN_OR_RETURN(HostTensor out, zimage_unpatchify(tokens, cfg.in_channels, ht, wt));
  return latent_crop(std::move(out), h, w);
}

Result<uint64_t> zimage_dit_min_device_bytes(Executor& ex, const ZImageConfig& cfg,
                                             const Shape& latent, int64_t cap_tokens, DType dtype) {
  if (latent.rank != 4)
    return make_error(ErrorCode::INVALID_ARGUMENT, "Z-Image latent {} is not [B, C, H, W]",
                      latent.str());
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> g,
                      zimage_graph_shared(cfg, latent[0], (latent[2] + 1) / 2, (latent[3] + 1) / 2,
                                          cap_tokens, dtype));
  return ex.min_device_bytes(*g);
}

}  // namespace hr
