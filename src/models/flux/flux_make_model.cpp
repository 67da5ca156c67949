// make-model for Flux.1: the component configurations, their tensor lists (from the graphs that
// read them), the random initialisation and the streamed writing of the five files.
#include "models/flux/flux_make_model.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "models/make_model_files.h"
#include "models/safetensors.h"

namespace hr {

namespace {

// Note [tiny flux]
// The tiny DiT keeps Flux's head width (2 heads of 128) so that ComfyUI's fixed RoPE axes
// 16/56/56 fit it, as they must for ComfyUI to load the file; one block of each kind. Its text
// widths are the tiny encoders' (T5 d_model 32, CLIP width 64) with the real vocabularies, so the
// shipped tokenizers drive them. The tiny autoencoder keeps the 16-channel, no-quant-conv layout
// at 32 base channels, widths 1, 2, 2, 2.
FluxConfig flux_dit_tiny() {
  FluxConfig c;
  c.hidden_size = 256;
  c.num_heads = 2;
  c.depth = 1;
  c.depth_single_blocks = 1;
  c.context_in_dim = 32;
  c.vec_in_dim = 64;
  return c;
}

// BFL's ae.safetensors: the LDM AutoencoderKL with z_channels 16 and no quant convs
// (comfy/sd.py VAE for Flux: ddconfig z_channels 16, double_z, ch 128, ch_mult 1,2,4,4).
VAEConfig flux_vae_config() {
  VAEConfig v;
  v.z_channels = 16;
  v.embed_dim = 16;
  v.use_quant_conv = false;
  return v;
}

}  // namespace

FluxMakeConfig flux_make_config(ModelSize size) {
  FluxMakeConfig c;
  c.dit = flux_config_dev();
  c.t5 = T5Config{};          // T5 v1.1 XXL encoder
  c.clip = CLIPTextConfig{};  // CLIP-L text model, HF layout
  c.vae = flux_vae_config();
  if (size == ModelSize::TINY) {
    c.dit = flux_dit_tiny();
    c.t5.d_model = 32;
    c.t5.d_kv = 8;
    c.t5.heads = 4;
    c.t5.d_ff = 64;
    c.t5.layers = 2;
    c.clip.width = 64;  // width / 64 heads, the rule that reads CLIP-L's 12 from its tensors
    c.clip.layers = 2;
    c.clip.heads = 1;
    c.clip.mlp = 128;
    c.vae.ch = 32;
    c.vae.ch_mult = {1, 2, 2, 2};  // make-model's tiny SD VAE widths
  }
  return c;
}

namespace {

Result<std::vector<MadeComponent>> components_plan(const FluxMakeConfig& c) {
  std::vector<MadeComponent> out(4);
  out[0].name = "dit";
  HR_ASSIGN_OR_RETURN(Graph dit, flux_dit_graph(c.dit, 1, 1, 1, 1, DType::F32));
  out[0].add_graph(dit, DType::BF16);
  out[1].name = "t5";
  HR_ASSIGN_OR_RETURN(Graph t5, t5_encoder_graph(c.t5, 1, 2, DType::F32));
  out[1].add_graph(t5, DType::F16);
  out[2].name = "clip";
  CLIPTextGraphOptions co;
  co.last_hidden_state = true;
  HR_ASSIGN_OR_RETURN(CLIPTextGraph clip, clip_text_graph(c.clip, co));
  out[2].add_graph(clip.graph, DType::F16);
  // HF's CLIPTextModel state dict holds its position ids (int64 0..76), as ComfyUI's files do.
  const std::string pos = "text_model.embeddings.position_ids";
  out[2].tensors[pos] = MadePlanned{
      {pos, DType::I64, Shape{1, c.clip.positions}}, "clip", pos, MadeInit::POSITION_IDS};
  out[3].name = "vae";
  const int64_t px = 8 * c.vae.downscale();
  HR_ASSIGN_OR_RETURN(Graph dec, vae_decode_graph(c.vae, 1, 8, 8, DType::F32));
  HR_ASSIGN_OR_RETURN(Graph enc, vae_encode_graph(c.vae, 1, px, px, DType::F32));
  out[3].add_graph(dec, DType::F32);
  out[3].add_graph(enc, DType::F32);
  return out;
}

}  // namespace

Result<std::vector<FluxMadeFile>> flux_make_model_write(const MakeModelSpec& spec,
                                                        const std::string& out_dir,
                                                        bool checkpoint) {
  namespace fs = std::filesystem;
  const FluxMakeConfig cfg = flux_make_config(spec.size);
  HR_ASSIGN_OR_RETURN(std::vector<MadeComponent> comps, components_plan(cfg));
  const MadeComponent &dit = comps[0], &t5 = comps[1], &clip = comps[2], &vae = comps[3];
  const fs::path root(out_dir);
  std::vector<std::string> dirs = {"diffusion_models", "text_encoders", "vae"};
  if (checkpoint) dirs.push_back("checkpoints");
  HR_TRY(made_dirs_create(out_dir, dirs));
  // Each file with the prefixes ComfyUI reads it under (Note [flux variants] in flux_family.cpp).
  const std::vector<
      std::pair<std::string, std::vector<std::pair<std::string, const MadeComponent*>>>>
      files = {
          {"diffusion_models/flux1-dev.safetensors", {{"", &dit}}},
          {"text_encoders/t5xxl_fp16.safetensors", {{"", &t5}}},
          {"text_encoders/clip_l.safetensors", {{"", &clip}}},
          {"vae/ae.safetensors", {{"", &vae}}},
          {"checkpoints/flux1-dev-all.safetensors",
           {{"model.diffusion_model.", &dit},
            {"text_encoders.t5xxl.transformer.", &t5},
            {"text_encoders.clip_l.transformer.", &clip},
            {"vae.", &vae}}},
      };
  std::vector<FluxMadeFile> out;
  for (const auto& [name, parts] : files) {
    if (!checkpoint && parts.size() > 1) continue;  // the single-file checkpoint
    const std::map<std::string, std::string> meta = {
        {"headroom.arch",
         fmt::format("flux-dev-{}", spec.size == ModelSize::TINY ? "tiny" : "full")},
        {"headroom.seed", std::to_string(spec.seed)}};
    HR_ASSIGN_OR_RETURN(FluxMadeFile f,
                        made_file_write((root / name).string(), parts, meta, spec.seed));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hr
