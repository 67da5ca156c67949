// UNet configuration detection and the forward-pass graph (LDM openaimodel.UNetModel layout).
#include "models/sd/unet.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/graph_cache.h"
#include "memory/weight_set.h"
#include "models/safetensors.h"

namespace hr {

std::string UNetConfig::str() const {
  return fmt::format(
      "in {} out {}, model_channels {}, channel_mult [{}], num_res_blocks [{}], "
      "transformer_depth [{}], middle {}, output [{}], context_dim {}, {} proj, adm {}, "
      "time_embed {}, {}",
      in_channels, out_channels, model_channels, fmt::join(channel_mult, ", "),
      fmt::join(num_res_blocks, ", "), fmt::join(transformer_depth, ", "),
      transformer_depth_middle, fmt::join(transformer_depth_output, ", "), context_dim,
      use_linear_in_transformer ? "linear" : "conv", adm_in_channels, time_embed_dim,
      num_heads > 0 ? fmt::format("{} heads", num_heads)
                    : fmt::format("head dim {}", num_head_channels));
}

UNetConfig unet_config_sd15() { return UNetConfig{}; }

UNetConfig unet_config_sd2() {
  UNetConfig c;
  c.context_dim = 1024;
  c.use_linear_in_transformer = true;
  c.num_heads = -1;
  c.num_head_channels = 64;
  return c;
}

UNetConfig unet_config_sdxl() {
  UNetConfig c;
  c.channel_mult = {1, 2, 4};
  c.num_res_blocks = {2, 2, 2};
  c.transformer_depth = {0, 0, 2, 2, 10, 10};
  c.transformer_depth_middle = 10;
  c.transformer_depth_output = {0, 0, 0, 2, 2, 2, 10, 10, 10};
  c.context_dim = 2048;
  c.use_linear_in_transformer = true;
  c.adm_in_channels = 2816;
  c.num_heads = -1;
  c.num_head_channels = 64;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Detection

namespace {

class ShapeReader {
 public:
  ShapeReader(const SafetensorsFile& f, std::string_view prefix) : f_(f), prefix_(prefix) {}
  const Shape* find(const std::string& name) const {
    const SafetensorsEntry* e = f_.find(prefix_ + name);
    return e ? &e->shape : nullptr;
  }
  bool has(const std::string& name) const { return find(name) != nullptr; }
  Result<Shape> need(const std::string& name, int rank) const {
    const Shape* s = find(name);
    if (!s)
      return make_error(ErrorCode::NOT_FOUND, "{}: UNet tensor '{}{}' is missing", f_.path(),
                        prefix_, name);
    if (s->rank != rank)
      return make_error(ErrorCode::CORRUPT, "{}: UNet tensor '{}{}' has shape {}, expected rank {}",
                        f_.path(), prefix_, name, s->str(), rank);
    return *s;
  }
  // Number of "<base>transformer_blocks.N" blocks.
  int depth(const std::string& base) const {
    int n = 0;
    while (has(fmt::format("{}transformer_blocks.{}.norm1.weight", base, n))) ++n;
    return n;
  }

 private:
  const SafetensorsFile& f_;
  std::string prefix_;
};

}  // namespace

Result<UNetConfig> unet_config_detect(const SafetensorsFile& file, std::string_view prefix) {
  ShapeReader r(file, prefix);
  UNetConfig c;
  HR_ASSIGN_OR_RETURN(Shape conv_in, r.need("input_blocks.0.0.weight", 4));
  HR_ASSIGN_OR_RETURN(Shape conv_out, r.need("out.2.weight", 4));
  HR_ASSIGN_OR_RETURN(Shape temb, r.need("time_embed.0.weight", 2));
  c.model_channels = int(conv_in[0]);
  c.in_channels = int(conv_in[1]);
  c.out_channels = int(conv_out[0]);
  c.time_embed_dim = int(temb[0]);
  c.channel_mult.clear();
  c.num_res_blocks.clear();
  c.transformer_depth.clear();
  c.transformer_depth_output.clear();
  c.context_dim = 0;
  c.use_linear_in_transformer = false;
  bool any_transformer = false;

  // Input blocks: a level ends at a downsample ("op") or after the last block.
  int level_blocks = 0;
  int level_channels = 0;
  for (int i = 1;; ++i) {
    std::string base = fmt::format("input_blocks.{}.", i);
    if (r.has(base + "0.op.weight")) {
      c.channel_mult.push_back(level_channels / c.model_channels);
      c.num_res_blocks.push_back(level_blocks);
      level_blocks = 0;
      continue;
    }
    const Shape* out = r.find(base + "0.out_layers.3.weight");
    if (!out) break;
    level_channels = int((*out)[0]);
    ++level_blocks;
    int d = r.depth(base + "1.");
    c.transformer_depth.push_back(d);
    if (d > 0 && !any_transformer) {
      any_transformer = true;
      HR_ASSIGN_OR_RETURN(Shape k, r.need(base + "1.transformer_blocks.0.attn2.to_k.weight", 2));
      c.context_dim = int(k[1]);
      const Shape* proj = r.find(base + "1.proj_in.weight");
      c.use_linear_in_transformer = proj && proj->rank == 2;
    }
  }
  if (level_blocks == 0)
    return make_error(ErrorCode::CORRUPT, "{}: UNet has no ResBlocks after input_blocks.0",
                      file.path());
  c.channel_mult.push_back(level_channels / c.model_channels);
  c.num_res_blocks.push_back(level_blocks);

  c.transformer_depth_middle = r.depth("middle_block.1.");
  if (c.transformer_depth_middle > 0 && !any_transformer) {
    any_transformer = true;
    HR_ASSIGN_OR_RETURN(Shape k, r.need("middle_block.1.transformer_blocks.0.attn2.to_k.weight", 2));
    c.context_dim = int(k[1]);
    const Shape* proj = r.find("middle_block.1.proj_in.weight");
    c.use_linear_in_transformer = proj && proj->rank == 2;
  }

  int n_out = 0;
  for (int n : c.num_res_blocks) n_out += n + 1;
  for (int i = 0; i < n_out; ++i) {
    std::string base = fmt::format("output_blocks.{}.", i);
    if (!r.has(base + "0.out_layers.3.weight"))
      return make_error(ErrorCode::NOT_FOUND, "{}: UNet tensor '{}{}0.out_layers.3.weight' is missing",
                        file.path(), prefix, base);
    c.transformer_depth_output.push_back(r.depth(base + "1."));
  }
  // ComfyUI lists output depths from the shallowest level (its builder pops from the back).
  std::reverse(c.transformer_depth_output.begin(), c.transformer_depth_output.end());

  if (const Shape* adm = r.find("label_emb.0.0.weight")) c.adm_in_channels = int((*adm)[1]);

  if (c.use_linear_in_transformer) {
    c.num_heads = -1;
    c.num_head_channels = c.model_channels < 64 ? c.model_channels : 64;
  } else {
    c.num_heads = 8;
    c.num_head_channels = -1;
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Graph

namespace {

constexpr int kGroups = 32;
constexpr float kResNormEps = 1e-5f;          // ResBlock and output GroupNorm32
constexpr float kTransformerNormEps = 1e-6f;  // SpatialTransformer.norm
constexpr float kLayerNormEps = 1e-5f;

class UNetBuilder {
 public:
  UNetBuilder(const UNetConfig& cfg, DType dtype) : c_(cfg), dt_(dtype) {
    g.set_weight_storage(cfg.storage);
  }

  Graph g;

  ValueId w(const std::string& name, Shape s) { return g.weight(name, TensorDesc{dt_, s}); }

  ValueId conv(ValueId x, const std::string& name, int64_t in, int64_t out, int k, int stride) {
    return g.conv2d(x, w(name + ".weight", {out, in, k, k}), w(name + ".bias", {out}), stride,
                    k / 2, name);
  }
  // Note [odd latent sizes]
  // A stride-2 convolution takes H to ceil(H / 2), so a latent whose side is not a multiple of
  // 2^(levels-1) (ComfyUI accepts any multiple of 8 pixels) comes back from a x2 upsample one row
  // or column larger than its skip connection. ComfyUI's UNet upsamples to the skip's size with
  // nearest interpolation: source index floor(d * in / out). For out = 2 in - 1 that is
  // floor(d / 2), exactly x2 nearest followed by dropping the last row or column, which is what
  // this does (a no-op where the sizes already agree, so even sizes build the same graph).
  ValueId crop_to(ValueId x, const Shape& skip, const std::string& name) {
    for (int axis : {2, 3})
      if (g.shape(x)[size_t(axis)] != skip[size_t(axis)])
        x = g.slice(x, axis, 0, skip[size_t(axis)], 1, name + (axis == 2 ? ".h" : ".w"));
    return x;
  }
  ValueId linear(ValueId x, const std::string& name, int64_t in, int64_t out, bool bias = true) {
    return g.linear(x, w(name + ".weight", {out, in}), bias ? w(name + ".bias", {out}) : kNoValue,
                    name);
  }
  // GroupNorm, then SiLU when asked (as separate ops: the fusion pass joins them).
  ValueId norm(ValueId x, const std::string& name, int64_t ch, float eps, bool silu) {
    ValueId h = g.group_norm(x, w(name + ".weight", {ch}), w(name + ".bias", {ch}), kGroups, eps,
                             false, name);
    return silu ? g.unary(OpKind::SILU, h, name + ".silu") : h;
  }
  ValueId layer_norm(ValueId x, const std::string& name, int64_t ch) {
    return g.layer_norm(x, w(name + ".weight", {ch}), w(name + ".bias", {ch}), kLayerNormEps, name);
  }

  // ResBlock: in_layers (GN+SiLU, conv3x3), + emb_layers(silu(emb)) broadcast, out_layers
  // (GN+SiLU, dropout = identity, conv3x3), + skip (1x1 conv exactly when widths differ).
  ValueId resblock(ValueId x, const std::string& name, int64_t in, int64_t out) {
    ValueId h = norm(x, name + ".in_layers.0", in, kResNormEps, true);
    h = conv(h, name + ".in_layers.2", in, out, 3, 1);
    ValueId e = linear(emb_silu_, name + ".emb_layers.1", c_.time_embed_dim, out);
    e = g.reshape(e, Shape{batch_, out, 1, 1}, name + ".emb_layers.1.reshape");
    h = g.add(h, e, name + ".emb_add");
    h = norm(h, name + ".out_layers.0", out, kResNormEps, true);
    h = conv(h, name + ".out_layers.3", out, out, 3, 1);
    ValueId skip = in != out ? conv(x, name + ".skip_connection", in, out, 1, 1) : x;
    return g.add(skip, h, name);
  }

  ValueId attention(ValueId x, ValueId ctx, const std::string& name, int64_t ch, int64_t ctx_dim,
                    int heads) {
    ValueId q = linear(x, name + ".to_q", ch, ch, false);
    ValueId k = linear(ctx, name + ".to_k", ctx_dim, ch, false);
    ValueId v = linear(ctx, name + ".to_v", ctx_dim, ch, false);
    ValueId a = g.attention(q, k, v, heads, false, name);
    return linear(a, name + ".to_out.0", ch, ch);
  }

  // BasicTransformerBlock on tokens [B, HW, C].
  ValueId transformer_block(ValueId x, const std::string& name, int64_t ch, int heads) {
    ValueId h = layer_norm(x, name + ".norm1", ch);
    x = g.add(attention(h, h, name + ".attn1", ch, ch, heads), x, name + ".attn1.residual");
    h = layer_norm(x, name + ".norm2", ch);
    x = g.add(attention(h, context_, name + ".attn2", ch, c_.context_dim, heads), x,
              name + ".attn2.residual");
    h = layer_norm(x, name + ".norm3", ch);
    h = linear(h, name + ".ff.net.0.proj", ch, ch * 8);
    h = g.unary(OpKind::GEGLU, h, name + ".ff.net.0.geglu");
    h = linear(h, name + ".ff.net.2", ch * 4, ch);
    return g.add(h, x, name + ".ff.residual");
  }

  // SpatialTransformer on x [B, C, H, W].
  ValueId spatial_transformer(ValueId x, const std::string& name, int64_t ch, int depth) {
    if (x == kNoValue) return kNoValue;  // an earlier shape error; g.status() has it
    const Shape s = g.shape(x);
    const int64_t hw = s[2] * s[3];
    const int heads = c_.heads_for(int(ch));
    ValueId h = norm(x, name + ".norm", ch, kTransformerNormEps, false);
    const bool lin = c_.use_linear_in_transformer;
    if (!lin) h = conv(h, name + ".proj_in", ch, ch, 1, 1);
    h = g.reshape(h, Shape{s[0], ch, hw}, name + ".to_tokens");
    h = g.permute(h, {0, 2, 1}, name + ".to_tokens");
    if (lin) h = linear(h, name + ".proj_in", ch, ch);
    for (int d = 0; d < depth; ++d)
      h = transformer_block(h, fmt::format("{}.transformer_blocks.{}", name, d), ch, heads);
    if (lin) h = linear(h, name + ".proj_out", ch, ch);
    h = g.permute(h, {0, 2, 1}, name + ".to_image");
    h = g.reshape(h, s, name + ".to_image");
    if (!lin) h = conv(h, name + ".proj_out", ch, ch, 1, 1);
    return g.add(h, x, name);
  }

  Status build(int64_t batch, int64_t height, int64_t width, int64_t tokens) {
    const UNetConfig& c = c_;
    batch_ = batch;
    const int levels = c.levels();
    if (levels < 1 || int(c.num_res_blocks.size()) != levels)
      return make_error(ErrorCode::INVALID_ARGUMENT, "UNet config: channel_mult and "
                        "num_res_blocks must have one entry per level ({})", c.str());
    size_t n_in = 0, n_out = 0;
    for (int n : c.num_res_blocks) n_in += size_t(n), n_out += size_t(n) + 1;
    if (c.transformer_depth.size() != n_in || c.transformer_depth_output.size() != n_out)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "UNet config: transformer_depth needs {} entries and "
                        "transformer_depth_output {} ({})", n_in, n_out, c.str());
    if ((c.num_heads > 0) == (c.num_head_channels > 0))
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "UNet config: set exactly one of num_heads and num_head_channels");
    if (batch < 1 || height < 1 || width < 1)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "UNet input {}x{} (batch {}): batch, height and width must be positive",
                        height, width, batch);
    if (tokens < 1)
      return make_error(ErrorCode::INVALID_ARGUMENT, "UNet context needs at least one token");

    const int64_t mc = c.model_channels;
    ValueId x = g.input("x", TensorDesc{dt_, Shape{batch, c.in_channels, height, width}});
    ValueId t = g.input("timesteps", TensorDesc{DType::F32, Shape{batch}});
    context_ = g.input("context", TensorDesc{dt_, Shape{batch, tokens, c.context_dim}});
    ValueId y = kNoValue;
    if (c.adm_in_channels > 0)
      y = g.input("y", TensorDesc{dt_, Shape{batch, c.adm_in_channels}});

    // Timestep embedding: [cos, sin] of t * exp(-ln(10000) i / half), computed in f32 inside
    // the op and emitted in the compute dtype (as LDM casts t_emb to the model dtype).
    OpParams tp;
    tp.dim = int(mc);
    tp.flip_sin_to_cos = true;
    tp.freq_shift = 0.0f;
    tp.max_period = 10000.0f;
    tp.dtype = dt_;
    ValueId emb = g.op(OpKind::TIMESTEP_EMBEDDING, tp, {t}, "timestep_embedding");
    emb = linear(emb, "time_embed.0", mc, c.time_embed_dim);
    emb = g.unary(OpKind::SILU, emb, "time_embed.1");
    emb = linear(emb, "time_embed.2", c.time_embed_dim, c.time_embed_dim);
    if (y != kNoValue) {
      ValueId l = linear(y, "label_emb.0.0", c.adm_in_channels, c.time_embed_dim);
      l = g.unary(OpKind::SILU, l, "label_emb.0.1");
      l = linear(l, "label_emb.0.2", c.time_embed_dim, c.time_embed_dim);
      emb = g.add(emb, l, "emb");
    }
    // Every ResBlock's emb_layers starts with SiLU(emb): computed once.
    emb_silu_ = g.unary(OpKind::SILU, emb, "emb_layers.0");

    // Input blocks; hs keeps every block's output (and width) for the skip connections.
    std::vector<std::pair<ValueId, int64_t>> hs;
    ValueId h = conv(x, "input_blocks.0.0", c.in_channels, mc, 3, 1);
    hs.push_back({h, mc});
    int64_t ch = mc;
    int idx = 1;
    size_t res_i = 0;
    for (int l = 0; l < levels; ++l) {
      for (int r = 0; r < c.num_res_blocks[size_t(l)]; ++r) {
        const int64_t out = int64_t(c.channel_mult[size_t(l)]) * mc;
        std::string base = fmt::format("input_blocks.{}", idx);
        h = resblock(h, base + ".0", ch, out);
        ch = out;
        if (int d = c.transformer_depth[res_i++]; d > 0)
          h = spatial_transformer(h, base + ".1", ch, d);
        hs.push_back({h, ch});
        ++idx;
      }
      if (l != levels - 1) {
        h = conv(h, fmt::format("input_blocks.{}.0.op", idx), ch, ch, 3, 2);
        hs.push_back({h, ch});
        ++idx;
      }
    }

    h = resblock(h, "middle_block.0", ch, ch);
    if (c.transformer_depth_middle > 0) {
      h = spatial_transformer(h, "middle_block.1", ch, c.transformer_depth_middle);
      h = resblock(h, "middle_block.2", ch, ch);
    } else {
      h = resblock(h, "middle_block.1", ch, ch);
    }

    idx = 0;
    for (int l = levels - 1; l >= 0; --l) {
      for (int r = 0; r <= c.num_res_blocks[size_t(l)]; ++r) {
        auto [skip, skip_ch] = hs.back();
        hs.pop_back();
        std::string base = fmt::format("output_blocks.{}", idx);
        h = g.concat({h, skip}, 1, base + ".concat");
        const int64_t out = int64_t(c.channel_mult[size_t(l)]) * mc;
        h = resblock(h, base + ".0", ch + skip_ch, out);
        ch = out;
        int sub = 1;
        if (int d = c.transformer_depth_output[n_out - 1 - size_t(idx)]; d > 0) {
          h = spatial_transformer(h, base + ".1", ch, d);
          sub = 2;
        }
        if (l > 0 && r == c.num_res_blocks[size_t(l)]) {
          std::string up = fmt::format("{}.{}", base, sub);
          OpParams p;
          p.factor = 2;
          h = g.op(OpKind::UPSAMPLE_NEAREST, p, {h}, up + ".upsample");
          h = crop_to(h, g.shape(hs.back().first), up + ".crop");
          h = conv(h, up + ".conv", ch, ch, 3, 1);
        }
        ++idx;
      }
    }

    h = norm(h, "out.0", ch, kResNormEps, true);
    h = conv(h, "out.2", ch, c.out_channels, 3, 1);
    g.output(h, "out");
    if (!g.status().ok()) return g.status().with_context("building the UNet graph");
    return Status();
  }

 private:
  const UNetConfig& c_;
  DType dt_;
  int64_t batch_ = 1;
  ValueId emb_silu_ = kNoValue;
  ValueId context_ = kNoValue;
};

}  // namespace

Result<Graph> unet_graph(const UNetConfig& cfg, int64_t batch, int64_t height, int64_t width,
                         int64_t tokens, DType dtype) {
  UNetBuilder b(cfg, dtype);
  HR_TRY(b.build(batch, height, width, tokens));
  return std::move(b.g);
}

namespace {

// Note [graph reuse] in graph/graph_cache.cpp.
Result<std::shared_ptr<const Graph>> unet_graph_shared(const UNetConfig& cfg, int64_t batch,
                                                       int64_t height, int64_t width,
                                                       int64_t tokens, DType dtype) {
  static GraphCache cache;
  const std::string key = fmt::format("{}|{}|{}x{}x{}|{}|{}", cfg.str(), cfg.storage_key, batch,
                                      height, width, tokens, dtype_name(dtype));
  return cache.get(key, [&] { return unet_graph(cfg, batch, height, width, tokens, dtype); });
}

}  // namespace

Result<uint64_t> unet_min_device_bytes(Executor& ex, const UNetConfig& cfg, int64_t batch,
                                       int64_t height, int64_t width, int64_t tokens, DType dtype) {
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> g,
                      unet_graph_shared(cfg, batch, height, width, tokens, dtype));
  return ex.min_device_bytes(*g);
}

Result<HostTensor> unet_run(Executor& ex, const UNetConfig& cfg, WeightSource& weights, DType dtype,
                            const HostTensor& x, const HostTensor& timesteps,
                            const HostTensor& context, const HostTensor* y) {
  if (x.shape().rank != 4 || context.shape().rank != 3 || timesteps.shape().rank != 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "unet_run: x {} must be [B, C, H, W], timesteps {} [B], context {} [B, T, C]",
                      x.desc().str(), timesteps.desc().str(), context.desc().str());
  if ((cfg.adm_in_channels > 0) != (y != nullptr))
    return make_error(ErrorCode::INVALID_ARGUMENT, "unet_run: this UNet {} a 'y' input",
                      cfg.adm_in_channels > 0 ? "needs" : "takes no");
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> graph,
                      unet_graph_shared(cfg, x.shape()[0], x.shape()[2], x.shape()[3],
                                        context.shape()[1], dtype));
  const Graph& g = *graph;
  // Converted copies only where the caller's dtype differs from the compute dtype.
  HostTensor xc, tc, cc, yc;
  auto as = [](const HostTensor& t, DType d, HostTensor& tmp) -> const HostTensor* {
    if (t.dtype() == d) return &t;
    tmp = t.to(d);
    return &tmp;
  };
  HostInputs in = {{"x", as(x, dtype, xc)},
                   {"timesteps", as(timesteps, DType::F32, tc)},
                   {"context", as(context, dtype, cc)}};
  if (y) in.push_back({"y", as(*y, dtype, yc)});
  weights.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, ex.run(g, in, weights));
  if (outs.size() != 1) return make_error(ErrorCode::INTERNAL, "UNet graph returned {} outputs", outs.size());
  if (outs[0].dtype() != DType::F32) return outs[0].to(DType::F32);
  return std::move(outs[0]);
}

}  // namespace hr
