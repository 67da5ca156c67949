// make-model for Z-Image: the component configurations and their tensor lists (from the graph
// and the layouts the loaders check), written through make_model_files.
#include "models/zimage/zimage_make_model.h"

#include <fmt/format.h>

#include <filesystem>

#include "models/flux/flux_vae_make.h"
#include "models/zimage/zimage_dit.h"

namespace hr {
namespace {

// Note [tiny z-image]
// The tiny DiT keeps Z-Image's head width (2 heads of 128) so that its fixed RoPE axes 32/48/48
// fit, with one layer and one refiner layer of each kind. The tiny Qwen3 keeps the full
// 151,936-entry vocabulary (the template's ids are above 151,000; 9.7 MB of bf16 at width 32)
// with 2 layers (hidden_states[-2] is the first layer's output), 2 query heads and 1 KV head of
// 16; the DiT's caption width is its hidden size. The autoencoder is Flux's tiny one.
ZImageConfig zimage_dit_tiny(int cap_feat_dim) {
  ZImageConfig c;
  c.dim = 256;
  c.n_heads = 2;
  c.n_layers = 1;
  c.n_refiner_layers = 1;
  c.cap_feat_dim = cap_feat_dim;
  c.adaln_dim = 256;  // min(dim, 256)
  c.t_hidden = 64;
  c.ffn_hidden = 682;  // int(dim / 3 * 8)
  return c;
}

LLMConfig zimage_llm_tiny() {
  LLMConfig c = llm_config_qwen3_4b();
  c.hidden = 32;
  c.intermediate = 64;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 16;
  return c;
}

}  // namespace

ZImageMakeConfig zimage_make_config(ModelSize size) {
  ZImageMakeConfig c;
  if (size == ModelSize::TINY) {
    c.llm = zimage_llm_tiny();
    c.dit = zimage_dit_tiny(int(c.llm.hidden));
  } else {
    c.llm = llm_config_qwen3_4b();
    c.dit = zimage_config_turbo();
  }
  c.vae = flux_vae_config(size);
  return c;
}

Result<std::vector<MadeFile>> zimage_make_model_write(const MakeModelSpec& spec,
                                                      const std::string& out_dir) {
  namespace fs = std::filesystem;
  const ZImageMakeConfig cfg = zimage_make_config(spec.size);
  MadeComponent dit{"dit", {}}, llm{"qwen3", {}}, vae{"vae", {}};
  // Two samples: every weight is declared, the pad tokens included (zimage_config_detect).
  HR_ASSIGN_OR_RETURN(Graph g, zimage_dit_graph(cfg.dit, 2, 1, 1, 1, DType::F32));
  dit.add_graph(g, DType::BF16);
  for (const auto& [name, shape] : llm_tensors(cfg.llm)) llm.add(name, DType::BF16, shape);
  HR_ASSIGN_OR_RETURN(auto vae_tensors, flux_vae_tensors(cfg.vae, ""));
  for (const auto& [name, shape] : vae_tensors) vae.add(name, DType::F32, shape);
  HR_TRY(made_dirs_create(out_dir, {"diffusion_models", "text_encoders", "vae"}));
  const std::map<std::string, std::string> meta = {
      {"headroom.arch",
       fmt::format("zimage-turbo-{}", spec.size == ModelSize::TINY ? "tiny" : "full")},
      {"headroom.seed", std::to_string(spec.seed)}};
  const std::vector<std::pair<std::string, const MadeComponent*>> files = {
      {"diffusion_models/z_image_turbo_bf16.safetensors", &dit},
      {"text_encoders/qwen_3_4b.safetensors", &llm},
      {"vae/ae.safetensors", &vae},
  };
  std::vector<MadeFile> out;
  for (const auto& [name, comp] : files) {
    HR_ASSIGN_OR_RETURN(MadeFile f, made_file_write((fs::path(out_dir) / name).string(),
                                                    {{"", comp}}, meta, spec.seed));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hr
