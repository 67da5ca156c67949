// Z-Image configuration: Turbo's values and detection from a file's tensors (Note [z-image key
// layout]).
#include "models/zimage/zimage_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/file_shapes.h"
#include "models/zimage/zimage_dit.h"

namespace hr {

std::string ZImageConfig::str() const {
  return fmt::format(
      "in {}, dim {}, {} heads, {} layers + {} refiner layers each, caption {}, adaln {}, "
      "t_embedder hidden {}, ffn {}, axes_dim [{}], theta {}, t_scale {}, norm eps {}, qk norm "
      "eps {}, pad multiple {}",
      in_channels, dim, n_heads, n_layers, n_refiner_layers, cap_feat_dim, adaln_dim, t_hidden,
      ffn_hidden, fmt::join(axes_dim, ", "), rope_theta, t_scale, norm_eps, qk_norm_eps,
      pad_multiple);
}

ZImageConfig zimage_config_turbo() { return ZImageConfig{}; }

namespace {


// Every weight the graph declares, against the file's names and shapes.
Status check_weights(const ZImageConfig& cfg, const SafetensorsFile& file,
                     std::string_view prefix) {
  // Two samples, two tokens each side: every weight is declared (pad tokens included).
  HR_ASSIGN_OR_RETURN(Graph g, zimage_dit_graph(cfg, 2, 1, 1, 1, DType::F32));
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::WEIGHT) continue;
    const std::string full = std::string(prefix) + v.name;
    const SafetensorsEntry* e = file.find(full);
    if (!e)
      return make_error(ErrorCode::NOT_FOUND, "{}: Z-Image tensor '{}' is missing", file.path(),
                        full);
    if (e->shape != v.desc.shape)
      return make_error(ErrorCode::CORRUPT,
                        "{}: Z-Image tensor '{}' has shape {}, expected {} ({})", file.path(), full,
                        e->shape.str(), v.desc.shape.str(), cfg.str());
  }
  return Status();
}

}  // namespace

Result<ZImageConfig> zimage_config_detect(const SafetensorsFile& file, std::string_view prefix) {
  FileShapes r(file, prefix, "Z-Image");
  ZImageConfig c;
  HR_ASSIGN_OR_RETURN(Shape x_in, r.need("x_embedder.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape cap, r.need("cap_embedder.1.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape t0, r.need("t_embedder.mlp.0.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape t2, r.need("t_embedder.mlp.2.weight", 2));
  HR_ASSIGN_OR_RETURN(Shape qk, r.need("layers.0.attention.q_norm.weight", 1));
  HR_ASSIGN_OR_RETURN(Shape ffn, r.need("layers.0.feed_forward.w1.weight", 2));
  c.dim = int(x_in[0]);
  if (x_in[1] % 4)
    return make_error(ErrorCode::CORRUPT,
                      "{}: Z-Image tensor '{}x_embedder.weight' has shape {}: its width is not "
                      "a 2x2 patch (4 x channels)",
                      file.path(), prefix, x_in.str());
  c.in_channels = int(x_in[1] / 4);
  c.cap_feat_dim = int(cap[1]);
  c.t_hidden = int(t0[0]);
  c.adaln_dim = int(t2[0]);
  c.ffn_hidden = int(ffn[0]);
  if (qk[0] < 2 || c.dim % qk[0])
    return make_error(ErrorCode::CORRUPT, "{}: Z-Image QK norm width {} does not divide dim {}",
                      file.path(), qk[0], c.dim);
  c.n_heads = int(c.dim / qk[0]);
  c.n_layers = r.count("layers.{}.attention.qkv.weight");
  c.n_refiner_layers = r.count("noise_refiner.{}.attention.qkv.weight");
  const int ctx_layers = r.count("context_refiner.{}.attention.qkv.weight");
  if (ctx_layers != c.n_refiner_layers)
    return make_error(ErrorCode::CORRUPT,
                      "{}: Z-Image file has {} noise_refiner and {} context_refiner layers; the "
                      "model has as many of each",
                      file.path(), c.n_refiner_layers, ctx_layers);
  // Z-Image's axes fit its head width (128) only (Note [z-image positions]).
  if (c.axes_dim[0] + c.axes_dim[1] + c.axes_dim[2] != c.head_dim()) c.axes_dim.clear();
  HR_TRY(check_weights(c, file, prefix));
  return c;
}

}  // namespace hr
