// A UNet-shaped graph at SD1.5 sizes, built only for planning: resblocks (group_norm+silu,
// conv 3x3, time embedding), transformer blocks (self/cross attention, GEGLU feed-forward),
// down/upsampling and skip concats kept alive from the down path to the up path.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace hr::test {

struct UNetShape {
  int64_t batch = 2;  // CFG: cond + uncond
  int64_t latent = 64;  // 512x512 images
  int64_t context_len = 77;
  int64_t context_dim = 768;
  int64_t model_ch = 320;
  std::vector<int64_t> mult{1, 2, 4, 4};
  std::vector<bool> attn{true, true, true, false};
  int heads = 8;
  DType dtype = DType::F16;
};

class UNetBuilder {
 public:
  UNetBuilder(Graph& g, const UNetShape& s) : g_(g), s_(s) {}

  void build() {
    const int64_t B = s_.batch, L = s_.latent;
    const int64_t tdim = s_.model_ch * 4;
    ValueId x = g_.input("x", desc({B, 4, L, L}));
    ValueId t = g_.input("t", TensorDesc{DType::F32, Shape{B}});
    ctx_ = g_.input("context", desc({B, s_.context_len, s_.context_dim}));
    OpParams tp;
    tp.dim = int32_t(s_.model_ch);
    tp.dtype = s_.dtype;
    ValueId e = g_.op(OpKind::TIMESTEP_EMBEDDING, tp, {t}, "time_embed.freq");
    e = g_.linear(e, w("time_embed.0.weight", {tdim, s_.model_ch}), w("time_embed.0.bias", {tdim}));
    e = g_.unary(OpKind::SILU, e);
    e = g_.linear(e, w("time_embed.2.weight", {tdim, tdim}), w("time_embed.2.bias", {tdim}));
    emb_ = g_.unary(OpKind::SILU, e, "emb_act");

    int64_t ch = s_.model_ch;
    ValueId h = conv(x, 4, ch, 3, 1, "input_blocks.0.0");
    std::vector<std::pair<ValueId, int64_t>> skips{{h, ch}};
    int block = 1;
    for (size_t lvl = 0; lvl < s_.mult.size(); ++lvl) {
      const int64_t out = s_.model_ch * s_.mult[lvl];
      for (int r = 0; r < 2; ++r) {
        std::string p = "input_blocks." + std::to_string(block++);
        h = resblock(h, ch, out, p + ".0");
        ch = out;
        if (s_.attn[lvl]) h = transformer(h, ch, p + ".1");
        skips.push_back({h, ch});
      }
      if (lvl + 1 < s_.mult.size()) {
        std::string p = "input_blocks." + std::to_string(block++);
        h = conv(h, ch, ch, 3, 2, p + ".0.op");
        skips.push_back({h, ch});
      }
    }
    h = resblock(h, ch, ch, "middle_block.0");
    h = transformer(h, ch, "middle_block.1");
    h = resblock(h, ch, ch, "middle_block.2");
    block = 0;
    for (size_t k = 0; k < s_.mult.size(); ++k) {
      const size_t lvl = s_.mult.size() - 1 - k;
      const int64_t out = s_.model_ch * s_.mult[lvl];
      for (int r = 0; r < 3; ++r) {
        std::string p = "output_blocks." + std::to_string(block++);
        auto [skip, skip_ch] = skips.back();
        skips.pop_back();
        h = g_.concat({h, skip}, 1, p + ".cat");
        h = resblock(h, ch + skip_ch, out, p + ".0");
        ch = out;
        if (s_.attn[lvl]) h = transformer(h, ch, p + ".1");
        if (r == 2 && lvl > 0) {
          OpParams up;
          up.factor = 2;
          h = g_.op(OpKind::UPSAMPLE_NEAREST, up, {h}, p + ".up");
          h = conv(h, ch, ch, 3, 1, p + ".up.conv");
        }
      }
    }
    h = g_.group_norm(h, w("out.0.weight", {ch}), w("out.0.bias", {ch}), 32, 1e-5f, true, "out.0");
    h = conv(h, ch, 4, 3, 1, "out.2");
    g_.output(h, "eps");
  }

 private:
  TensorDesc desc(std::initializer_list<int64_t> d) const { return TensorDesc{s_.dtype, Shape(d)}; }
  ValueId w(const std::string& name, std::initializer_list<int64_t> d) {
    return g_.weight(name, desc(d));
  }
  ValueId conv(ValueId x, int64_t cin, int64_t cout, int k, int stride, const std::string& p) {
    ValueId wt = g_.weight(p + ".weight", TensorDesc{s_.dtype, Shape{cout, cin, k, k}});
    return g_.conv2d(x, wt, w(p + ".bias", {cout}), stride, k / 2, p);
  }
  ValueId norm(ValueId x, int64_t ch, bool silu, const std::string& p) {
    return g_.group_norm(x, w(p + ".weight", {ch}), w(p + ".bias", {ch}), 32, 1e-5f, silu, p);
  }
  ValueId resblock(ValueId x, int64_t cin, int64_t cout, const std::string& p) {
    const int64_t B = s_.batch;
    ValueId h = norm(x, cin, true, p + ".in_layers.0");
    h = conv(h, cin, cout, 3, 1, p + ".in_layers.2");
    ValueId e = g_.linear(emb_, w(p + ".emb_layers.1.weight", {cout, s_.model_ch * 4}),
                          w(p + ".emb_layers.1.bias", {cout}), p + ".emb");
    e = g_.reshape(e, Shape{B, cout, 1, 1}, p + ".emb.view");
    h = g_.add(h, e, p + ".add_emb");
    h = norm(h, cout, true, p + ".out_layers.0");
    h = conv(h, cout, cout, 3, 1, p + ".out_layers.3");
    ValueId skip = cin == cout ? x : conv(x, cin, cout, 1, 1, p + ".skip_connection");
    return g_.add(skip, h, p + ".out");
  }
  ValueId ln(ValueId x, int64_t ch, const std::string& p) {
    return g_.layer_norm(x, w(p + ".weight", {ch}), w(p + ".bias", {ch}), 1e-5f, p);
  }
  ValueId attn(ValueId x, ValueId ctx, int64_t ch, int64_t ctx_ch, const std::string& p) {
    ValueId q = g_.linear(x, w(p + ".to_q.weight", {ch, ch}), kNoValue, p + ".to_q");
    ValueId k = g_.linear(ctx, w(p + ".to_k.weight", {ch, ctx_ch}), kNoValue, p + ".to_k");
    ValueId v = g_.linear(ctx, w(p + ".to_v.weight", {ch, ctx_ch}), kNoValue, p + ".to_v");
    ValueId a = g_.attention(q, k, v, s_.heads, false, p);
    return g_.linear(a, w(p + ".to_out.0.weight", {ch, ch}), w(p + ".to_out.0.bias", {ch}),
                     p + ".to_out");
  }
  ValueId transformer(ValueId x, int64_t ch, const std::string& p) {
    const int64_t B = s_.batch;
    const Shape xs = g_.shape(x);
    const int64_t H = xs[2], W = xs[3];
    ValueId h = g_.group_norm(x, w(p + ".norm.weight", {ch}), w(p + ".norm.bias", {ch}), 32, 1e-6f,
                              false, p + ".norm");
    h = conv(h, ch, ch, 1, 1, p + ".proj_in");
    h = g_.permute(h, {0, 2, 3, 1}, p + ".to_tokens");
    h = g_.reshape(h, Shape{B, H * W, ch}, p + ".tokens");
    const std::string tb = p + ".transformer_blocks.0";
    ValueId n = ln(h, ch, tb + ".norm1");
    h = g_.add(h, attn(n, n, ch, ch, tb + ".attn1"), tb + ".res1");
    n = ln(h, ch, tb + ".norm2");
    h = g_.add(h, attn(n, ctx_, ch, s_.context_dim, tb + ".attn2"), tb + ".res2");
    n = ln(h, ch, tb + ".norm3");
    ValueId f = g_.linear(n, w(tb + ".ff.net.0.proj.weight", {ch * 8, ch}),
                          w(tb + ".ff.net.0.proj.bias", {ch * 8}), tb + ".ff.proj");
    f = g_.unary(OpKind::GEGLU, f, tb + ".ff.geglu");
    f = g_.linear(f, w(tb + ".ff.net.2.weight", {ch, ch * 4}), w(tb + ".ff.net.2.bias", {ch}),
                  tb + ".ff.out");
    h = g_.add(h, f, tb + ".res3");
    h = g_.reshape(h, Shape{B, H, W, ch}, p + ".grid");
    h = g_.permute(h, {0, 3, 1, 2}, p + ".to_nchw");
    h = conv(h, ch, ch, 1, 1, p + ".proj_out");
    return g_.add(h, x, p + ".out");
  }

  Graph& g_;
  UNetShape s_;
  ValueId emb_ = kNoValue;
  ValueId ctx_ = kNoValue;
};

inline Graph unet_graph(const UNetShape& s) {
  Graph g;
  UNetBuilder(g, s).build();
  return g;
}

}  // namespace hr::test
