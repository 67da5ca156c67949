// The Flux.1 autoencoder's configurations and random-weight files (Note [flux vae]).
#include "models/flux/flux_vae_make.h"

#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "models/safetensors.h"

namespace hr {

VAEConfig flux_vae_config(ModelSize size) {
  VAEConfig c = vae_config_sd();  // ComfyUI's default ddconfig: ch 128, [1, 2, 4, 4], 2 blocks
  c.z_channels = 16;
  c.embed_dim = 16;
  c.use_quant_conv = false;
  if (size == ModelSize::TINY) {
    c.ch = 32;
    c.ch_mult = {1, 2, 2, 2};
  }
  return c;
}

Result<std::map<std::string, Shape>> flux_vae_tensors(const VAEConfig& cfg,
                                                      std::string_view prefix) {
  const int64_t px = cfg.downscale();
  HR_ASSIGN_OR_RETURN(Graph dec, vae_decode_graph(cfg, 1, 1, 1, DType::F32));
  HR_ASSIGN_OR_RETURN(Graph enc, vae_encode_graph(cfg, 1, px, px, DType::F32));
  std::map<std::string, Shape> out;
  for (const Graph* g : {&dec, &enc})
    for (const Value& v : g->values())
      if (v.kind == ValueKind::WEIGHT) out[std::string(prefix) + v.name] = v.desc.shape;
  return out;
}

Result<uint64_t> flux_vae_random_weights(const VAEConfig& cfg, std::string_view prefix,
                                         uint64_t seed, DType dtype, WeightSet& out) {
  HR_ASSIGN_OR_RETURN(auto shapes, flux_vae_tensors(cfg, prefix));
  std::mt19937_64 rng(seed);
  uint64_t params = 0;
  for (const auto& [name, shape] : shapes) {
    HostTensor t(DType::F32, shape);
    // The fill reads the name without the prefix, as make_model_write's does.
    make_model_random_fill(name.substr(prefix.size()), t, rng);
    params += uint64_t(t.numel());
    out.put(name, dtype == DType::F32 ? std::move(t) : t.to(dtype));
  }
  return params;
}

Result<uint64_t> make_flux_vae(ModelSize size, uint64_t seed, DType dtype,
                               const std::string& path) {
  WeightSet w;
  HR_ASSIGN_OR_RETURN(uint64_t params,
                      flux_vae_random_weights(flux_vae_config(size), "", seed, dtype, w));
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (const std::string& name : w.names()) list.emplace_back(name, w.find(name));
  const std::map<std::string, std::string> meta = {
      {"headroom.arch", size == ModelSize::TINY ? "flux-vae-tiny" : "flux-vae-full"},
      {"headroom.seed", std::to_string(seed)},
  };
  HR_TRY(safetensors_write(path, list, meta).with_context(fmt::format("writing {}", path)));
  return params;
}

}  // namespace hr
