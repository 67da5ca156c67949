// VAE configuration detection and the decoder / encoder graphs (LDM autoencoder layout).
#include "models/sd/vae.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "memory/weight_set.h"
#include "models/safetensors.h"

namespace hr {

std::string VAEConfig::str() const {
  return fmt::format("ch {}, ch_mult [{}], num_res_blocks {}, z_channels {}, embed_dim {}{}", ch,
                     fmt::join(ch_mult, ", "), num_res_blocks, z_channels, embed_dim,
                     use_quant_conv ? "" : ", no quant_conv");
}

VAEConfig vae_config_sd() { return VAEConfig{}; }

Result<VAEConfig> vae_config_detect(const SafetensorsFile& file, std::string_view prefix) {
  const std::string pre(prefix);
  auto find = [&](const std::string& n) -> const Shape* {
    const SafetensorsEntry* e = file.find(pre + n);
    return e ? &e->shape : nullptr;
  };
  auto need = [&](const std::string& n) -> Result<Shape> {
    const Shape* s = find(n);
    if (!s)
      return make_error(ErrorCode::NOT_FOUND, "{}: VAE tensor '{}{}' is missing", file.path(), pre,
                        n);
    if (s->rank != 4)
      return make_error(ErrorCode::CORRUPT, "{}: VAE tensor '{}{}' has shape {}, expected 4-d",
                        file.path(), pre, n, s->str());
    return *s;
  };
  VAEConfig c;
  HR_ASSIGN_OR_RETURN(Shape enc_in, need("encoder.conv_in.weight"));
  HR_ASSIGN_OR_RETURN(Shape dec_in, need("decoder.conv_in.weight"));
  HR_ASSIGN_OR_RETURN(Shape dec_out, need("decoder.conv_out.weight"));
  c.ch = int(enc_in[0]);
  c.in_channels = int(enc_in[1]);
  c.out_channels = int(dec_out[0]);
  c.z_channels = int(dec_in[1]);
  c.ch_mult.clear();
  for (int i = 0;; ++i) {
    const Shape* s = find(fmt::format("encoder.down.{}.block.0.conv1.weight", i));
    if (!s) break;
    c.ch_mult.push_back(int((*s)[0]) / c.ch);
  }
  if (c.ch_mult.empty()) {
    HR_ASSIGN_OR_RETURN(Shape unused, need("encoder.down.0.block.0.conv1.weight"));
    (void)unused;
  }
  c.num_res_blocks = 0;
  while (find(fmt::format("encoder.down.0.block.{}.conv1.weight", c.num_res_blocks)))
    ++c.num_res_blocks;
  if (const Shape* pq = find("post_quant_conv.weight")) {
    c.use_quant_conv = true;
    c.embed_dim = int((*pq)[0]);
  } else {
    c.use_quant_conv = false;
    c.embed_dim = c.z_channels;
  }
  return c;
}

Status vae_input_check(const VAEConfig& cfg, const Shape& s, bool decode, std::string_view what) {
  const char* input = decode ? "latent" : "image";
  if (s.rank != 4)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: the {} {} must be [B, C, H, W]", what,
                      input, s.str());
  const int64_t want = decode ? cfg.embed_dim : cfg.in_channels;
  if (s[1] != want)  // Note [vae channels]
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: the {} has {} channels but this VAE takes {}-channel {}s{}", what,
                      input, s[1], want, input,
                      decode ? " (a latent of another model family? decode it with that "
                               "family's VAE)"
                             : "");
  return Status();
}

namespace {

constexpr int kGroups = 32;
constexpr float kNormEps = 1e-6f;

class VAEBuilder {
 public:
  VAEBuilder(const VAEConfig& cfg, DType dtype) : c_(cfg), dt_(dtype) {}

  Graph g;

  ValueId w(const std::string& name, Shape s) { return g.weight(name, TensorDesc{dt_, s}); }

  ValueId conv(ValueId x, const std::string& name, int64_t in, int64_t out, int k) {
    return g.conv2d(x, w(name + ".weight", {out, in, k, k}), w(name + ".bias", {out}), 1, k / 2,
                    name);
  }
  // GroupNorm, then SiLU when asked (as separate ops: the fusion pass joins them).
  ValueId norm(ValueId x, const std::string& name, int64_t ch, bool silu) {
    ValueId h = g.group_norm(x, w(name + ".weight", {ch}), w(name + ".bias", {ch}), kGroups,
                             kNormEps, false, name);
    return silu ? g.unary(OpKind::SILU, h, name + ".silu") : h;
  }

  // ResnetBlock without time embedding; nin_shortcut (1x1) exactly when widths differ.
  ValueId resnet(ValueId x, const std::string& name, int64_t in, int64_t out) {
    ValueId h = norm(x, name + ".norm1", in, true);
    h = conv(h, name + ".conv1", in, out, 3);
    h = norm(h, name + ".norm2", out, true);
    h = conv(h, name + ".conv2", out, out, 3);
    ValueId skip = in != out ? conv(x, name + ".nin_shortcut", in, out, 1) : x;
    return g.add(skip, h, name);
  }

  // AttnBlock: single head over the H*W tokens, q/k/v/proj_out 1x1 convolutions.
  ValueId attn(ValueId x, const std::string& name, int64_t ch) {
    if (x == kNoValue) return kNoValue;
    const Shape s = g.shape(x);
    const int64_t hw = s[2] * s[3];
    ValueId h = norm(x, name + ".norm", ch, false);
    auto tokens = [&](const char* which) {
      ValueId t = conv(h, name + "." + which, ch, ch, 1);
      t = g.reshape(t, Shape{s[0], ch, hw}, name + "." + which + ".tokens");
      return g.permute(t, {0, 2, 1}, name + "." + which + ".tokens");
    };
    ValueId q = tokens("q"), k = tokens("k"), v = tokens("v");
    ValueId a = g.attention(q, k, v, 1, false, name);
    a = g.permute(a, {0, 2, 1}, name + ".to_image");
    a = g.reshape(a, s, name + ".to_image");
    a = conv(a, name + ".proj_out", ch, ch, 1);
    return g.add(x, a, name + ".residual");
  }

  ValueId mid(ValueId h, const std::string& base, int64_t ch) {
    h = resnet(h, base + ".mid.block_1", ch, ch);
    h = attn(h, base + ".mid.attn_1", ch);
    return resnet(h, base + ".mid.block_2", ch, ch);
  }

  Status check(int64_t batch, int64_t height, int64_t width) const {
    if (c_.levels() < 1 || c_.num_res_blocks < 1)
      return make_error(ErrorCode::INVALID_ARGUMENT, "VAE config: bad levels ({})", c_.str());
    if (batch < 1 || height < 1 || width < 1)
      return make_error(ErrorCode::INVALID_ARGUMENT, "VAE input {}x{} batch {}: must be positive",
                        height, width, batch);
    return Status();
  }

  Status decode(int64_t batch, int64_t height, int64_t width) {
    HR_TRY(check(batch, height, width));
    const int levels = c_.levels();
    ValueId z = g.input("latent", TensorDesc{dt_, Shape{batch, c_.embed_dim, height, width}});
    if (c_.use_quant_conv) z = conv(z, "post_quant_conv", c_.embed_dim, c_.z_channels, 1);
    int64_t ch = int64_t(c_.ch) * c_.ch_mult.back();
    ValueId h = conv(z, "decoder.conv_in", c_.z_channels, ch, 3);
    h = mid(h, "decoder", ch);
    for (int l = levels - 1; l >= 0; --l) {
      const int64_t out = int64_t(c_.ch) * c_.ch_mult[size_t(l)];
      for (int b = 0; b <= c_.num_res_blocks; ++b) {
        h = resnet(h, fmt::format("decoder.up.{}.block.{}", l, b), ch, out);
        ch = out;
      }
      if (l != 0) {
        std::string up = fmt::format("decoder.up.{}.upsample", l);
        OpParams p;
        p.factor = 2;
        h = g.op(OpKind::UPSAMPLE_NEAREST, p, {h}, up);
        h = conv(h, up + ".conv", ch, ch, 3);
      }
    }
    h = norm(h, "decoder.norm_out", ch, true);
    h = conv(h, "decoder.conv_out", ch, c_.out_channels, 3);
    g.output(h, "image");
    if (!g.status().ok()) return g.status().with_context("building the VAE decoder graph");
    return Status();
  }

  Status encode(int64_t batch, int64_t height, int64_t width) {
    HR_TRY(check(batch, height, width));
    const int levels = c_.levels();
    ValueId x = g.input("image", TensorDesc{dt_, Shape{batch, c_.in_channels, height, width}});
    int64_t ch = c_.ch;
    ValueId h = conv(x, "encoder.conv_in", c_.in_channels, ch, 3);
    for (int l = 0; l < levels; ++l) {
      const int64_t out = int64_t(c_.ch) * c_.ch_mult[size_t(l)];
      for (int b = 0; b < c_.num_res_blocks; ++b) {
        h = resnet(h, fmt::format("encoder.down.{}.block.{}", l, b), ch, out);
        ch = out;
      }
      if (l != levels - 1) {
        // LDM Downsample: zero pad right and bottom by one, then 3x3 stride 2 without padding.
        std::string name = fmt::format("encoder.down.{}.downsample.conv", l);
        OpParams p;
        p.stride[0] = p.stride[1] = 2;
        p.pad[0] = 0, p.pad[1] = 1, p.pad[2] = 0, p.pad[3] = 1;
        h = g.op(OpKind::CONV2D, p,
                 {h, w(name + ".weight", {ch, ch, 3, 3}), w(name + ".bias", {ch})}, name);
      }
    }
    h = mid(h, "encoder", ch);
    h = norm(h, "encoder.norm_out", ch, true);
    const int64_t moments = 2 * int64_t(c_.z_channels);
    h = conv(h, "encoder.conv_out", ch, moments, 3);
    int64_t e = c_.z_channels;
    if (c_.use_quant_conv) {
      h = conv(h, "quant_conv", moments, 2 * int64_t(c_.embed_dim), 1);
      e = c_.embed_dim;
    }
    g.output(g.slice(h, 1, 0, e, 1, "mean"), "mean");
    g.output(g.slice(h, 1, e, 2 * e, 1, "logvar"), "logvar");
    if (!g.status().ok()) return g.status().with_context("building the VAE encoder graph");
    return Status();
  }

 private:
  const VAEConfig& c_;
  DType dt_;
};

const HostTensor* as_dtype(const HostTensor& t, DType d, HostTensor& tmp) {
  if (t.dtype() == d) return &t;
  tmp = t.to(d);
  return &tmp;
}

HostTensor to_f32(HostTensor t) { return t.dtype() == DType::F32 ? std::move(t) : t.to(DType::F32); }

}  // namespace

Result<Graph> vae_decode_graph(const VAEConfig& cfg, int64_t batch, int64_t height,
                               int64_t width, DType dtype) {
  VAEBuilder b(cfg, dtype);
  HR_TRY(b.decode(batch, height, width));
  return std::move(b.g);
}

Result<Graph> vae_encode_graph(const VAEConfig& cfg, int64_t batch, int64_t height,
                               int64_t width, DType dtype) {
  VAEBuilder b(cfg, dtype);
  HR_TRY(b.encode(batch, height, width));
  return std::move(b.g);
}

Result<HostTensor> vae_decode(Executor& ex, const VAEConfig& cfg, WeightSet& weights, DType dtype,
                              const HostTensor& latent) {
  HR_TRY(vae_input_check(cfg, latent.shape(), true, "vae_decode"));
  HR_ASSIGN_OR_RETURN(Graph g, vae_decode_graph(cfg, latent.shape()[0], latent.shape()[2],
                                                latent.shape()[3], dtype));
  HostTensor tmp;
  weights.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs,
                      ex.run(g, {{"latent", as_dtype(latent, dtype, tmp)}}, weights));
  if (outs.size() != 1)
    return make_error(ErrorCode::INTERNAL, "VAE decoder returned {} outputs", outs.size());
  return to_f32(std::move(outs[0]));
}

Result<VAEMoments> vae_encode(Executor& ex, const VAEConfig& cfg, WeightSet& weights, DType dtype,
                              const HostTensor& image) {
  HR_TRY(vae_input_check(cfg, image.shape(), false, "vae_encode"));
  HR_ASSIGN_OR_RETURN(Graph g, vae_encode_graph(cfg, image.shape()[0], image.shape()[2],
                                                image.shape()[3], dtype));
  HostTensor tmp;
  weights.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs,
                      ex.run(g, {{"image", as_dtype(image, dtype, tmp)}}, weights));
  if (outs.size() != 2)
    return make_error(ErrorCode::INTERNAL, "VAE encoder returned {} outputs", outs.size());
  VAEMoments m{to_f32(std::move(outs[0])), to_f32(std::move(outs[1]))};
  // DiagonalGaussianDistribution clamps logvar to [-30, 20]; done here because the op set has
  // no clamp and the tensor is small (latent-sized).
  float* lv = m.logvar.f32();
  for (int64_t i = 0; i < m.logvar.numel(); ++i) lv[i] = std::clamp(lv[i], -30.0f, 20.0f);
  return m;
}

}  // namespace hr
