// The Flux.1 LoRA key map: every DiT weight under ComfyUI's generic and kohya stems, and the
// diffusers transformer names (comfy/utils.py flux_to_diffusers) as rows of BFL's fused tensors.
#include "models/flux/flux_lora_keys.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

#include "models/flux/flux_model.h"
#include "models/lora_stems.h"
#include "models/text_encoder.h"

namespace hr {
namespace {

// Note [flux lora keys]
// headroom keeps the Flux DiT in BFL's layout under BFL's names, as ComfyUI's Flux module does
// (no tensor is fused, split or transposed otherwise), so a ComfyUI key "diffusion_model.X" is
// headroom's weight X. ComfyUI a125cd84's model_lora_keys_unet gives a Flux model:
//  - every tensor X: "diffusion_model.X" (a weight without its ".weight"), and for weights
//    kohya's "lora_unet_" + X with '.' -> '_';
//  - every diffusers weight name D of flux_to_diffusers: "transformer.D", "lycoris_" + D and
//    "lora_transformer_" + D ('.' -> '_' in both). Diffusers keeps q, k and v (and the single
//    blocks' MLP input) apart where BFL fuses them: to_q/to_k/to_v are row thirds of a double
//    block's img_attn.qkv, add_q/k/v_proj of txt_attn.qkv, and a single block's to_q/to_k/to_v
//    and proj_mlp are rows [0,H), [H,2H), [2H,3H), [3H,7H) of linear1 (H the hidden size);
//  - "diffusion_model.single_blocks.N.linear1_qkv": rows [0, 3H) of linear1.
// The text encoders (ComfyUI's model_lora_keys_clip on FluxClipModel, whose keys are headroom's
// store names behind "clip_l.transformer." / "t5xxl.transformer."): every weight K under
// "text_encoders." + K; CLIP-L's q/k/v/out projections and MLP of layers < 32 under kohya's
// "lora_te_" and "lora_te1_" + "text_model_encoder_layers_N_<layer>" and diffusers'
// "text_encoder.text_model.encoder.layers.N.<layer>"; its text_projection as
// "lora_te1_text_projection"; every T5 weight X as "lora_te2_" + X and "lora_te3_" + X ('.' ->
// '_'; OneTrainer's Flux numbering, "lora_te1_" when there are no CLIP-L layers).
// Left out: diffusers' norm_out.linear, which ComfyUI maps onto final_layer.adaLN_modulation.1
// with its two row halves swapped (swap_scale_shift): a LoraTarget is one row range, not a
// permutation, so a LoRA on it reports those stems as not loaded. Stems of tensors the model
// lacks (guidance_in on schnell, controlnet_x_embedder) are not in the map.
// flux_to_diffusers' one-to-one names of a double block (its block_map, weights only).
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kDoubleBlock = {{
    {"attn.to_out.0", "img_attn.proj.weight"},
    {"norm1.linear", "img_mod.lin.weight"},
    {"norm1_context.linear", "txt_mod.lin.weight"},
    {"attn.to_add_out", "txt_attn.proj.weight"},
    {"ff.net.0.proj", "img_mlp.0.weight"},
    {"ff.net.2", "img_mlp.2.weight"},
    {"ff_context.net.0.proj", "txt_mlp.0.weight"},
    {"ff_context.net.2", "txt_mlp.2.weight"},
    {"attn.norm_q", "img_attn.norm.query_norm.scale"},
    {"attn.norm_k", "img_attn.norm.key_norm.scale"},
    {"attn.norm_added_q", "txt_attn.norm.query_norm.scale"},
    {"attn.norm_added_k", "txt_attn.norm.key_norm.scale"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kSingleBlock = {{
    {"norm.linear", "modulation.lin.weight"},
    {"proj_out", "linear2.weight"},
    {"attn.norm_q", "norm.query_norm.scale"},
    {"attn.norm_k", "norm.key_norm.scale"},
}};

// flux_to_diffusers' MAP_BASIC, weights only, without norm_out.linear (Note [flux lora keys]).
constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kBasic = {{
    {"proj_out", "final_layer.linear.weight"},
    {"x_embedder", "img_in.weight"},
    {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer.weight"},
    {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer.weight"},
    {"context_embedder", "txt_in.weight"},
    {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer.weight"},
    {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer.weight"},
    {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer.weight"},
    {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer.weight"},
}};

std::vector<LoraDiffusersName> flux_diffusers_names(const FluxConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<LoraDiffusersName> out;
  for (int i = 0; i < c.depth; ++i) {
    const std::string from = fmt::format("transformer_blocks.{}.", i);
    const std::string to = fmt::format("double_blocks.{}.", i);
    constexpr std::array<std::string_view, 3> kImg = {"to_q", "to_k", "to_v"};
    constexpr std::array<std::string_view, 3> kTxt = {"add_q_proj", "add_k_proj", "add_v_proj"};
    for (int j = 0; j < 3; ++j) {
      out.push_back({from + "attn." + std::string(kImg[j]), to + "img_attn.qkv.weight", j * h, h});
      out.push_back({from + "attn." + std::string(kTxt[j]), to + "txt_attn.qkv.weight", j * h, h});
    }
    for (const auto& [d, w] : kDoubleBlock)
      out.push_back({from + std::string(d), to + std::string(w)});
  }
  for (int i = 0; i < c.depth_single_blocks; ++i) {
    const std::string from = fmt::format("single_transformer_blocks.{}.", i);
    const std::string linear1 = fmt::format("single_blocks.{}.linear1.weight", i);
    constexpr std::array<std::string_view, 3> kQKV = {"attn.to_q", "attn.to_k", "attn.to_v"};
    for (int j = 0; j < 3; ++j) out.push_back({from + std::string(kQKV[j]), linear1, j * h, h});
    out.push_back({from + "proj_mlp", linear1, 3 * h, 4 * h});
    for (const auto& [d, w] : kSingleBlock)
      out.push_back({from + std::string(d), fmt::format("single_blocks.{}.{}", i, w)});
  }
  for (const auto& [d, w] : kBasic) out.push_back({std::string(d), std::string(w)});
  return out;
}

void dit_keys(LoraKeyMap& map, const FluxModel& flux) {
  lora_generic_diffusion_keys(map, flux.store);
  for (const LoraDiffusersName& d : flux_diffusers_names(flux.config)) {
    if (!flux.store.contains(d.weight)) continue;
    const LoraTarget t = lora_diffusion_target(d.weight, d.row_offset, d.rows);
    const std::string kohya = lora_underscored(d.diffusers);
    map["transformer." + d.diffusers] = t;
    map["lycoris_" + kohya] = t;
    map["lora_transformer_" + kohya] = t;
  }
  const int64_t h = flux.config.hidden_size;
  for (int i = 0; i < flux.config.depth_single_blocks; ++i) {
    const std::string linear1 = fmt::format("single_blocks.{}.linear1.weight", i);
    if (flux.store.contains(linear1))
      map[fmt::format("diffusion_model.single_blocks.{}.linear1_qkv", i)] =
          lora_diffusion_target(linear1, 0, 3 * h);
  }
}

// ComfyUI's LORA_CLIP_MAP: the CLIP layers kohya and diffusers LoRAs name.
constexpr std::array<std::string_view, 6> kClipLayers = {"mlp.fc1",          "mlp.fc2",
                                                         "self_attn.k_proj", "self_attn.q_proj",
                                                         "self_attn.v_proj", "self_attn.out_proj"};
constexpr int kClipLayersSearched = 32;  // ComfyUI looks at layers 0..31

// "clip_l.transformer.text_model.encoder.layers.N.<layer>.weight" (N < 32, <layer> one of
// kClipLayers) -> "N.<layer>", else "".
std::string clip_l_layer(std::string_view key) {
  constexpr std::string_view kLayers = "clip_l.transformer.text_model.encoder.layers.";
  constexpr std::string_view kWeight = ".weight";
  if (!key.starts_with(kLayers) || !key.ends_with(kWeight)) return "";
  const std::string_view rest =
      key.substr(kLayers.size(), key.size() - kLayers.size() - kWeight.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 2 ||
      rest.substr(0, dot).find_first_not_of("0123456789") != std::string_view::npos)
    return "";
  if (std::stoi(std::string(rest.substr(0, dot))) >= kClipLayersSearched) return "";
  for (std::string_view l : kClipLayers)
    if (rest.substr(dot + 1) == l) return std::string(rest);
  return "";
}

void text_keys(LoraKeyMap& map, const TextEncoder& text) {
  constexpr std::string_view kWeight = ".weight";
  constexpr std::string_view kT5 = "t5xxl.transformer.";
  const std::vector<std::shared_ptr<WeightSet>> stores = text.stores();
  // (comfy key, target) of every weight, in ComfyUI's names.
  std::vector<std::pair<std::string, LoraTarget>> weights;
  bool clip_l_present = false;
  for (size_t i = 0; i < stores.size(); ++i) {
    if (!stores[i]) continue;
    const std::string prefix = text.comfy_key_prefix(i);
    for (const std::string& name : stores[i]->names()) {
      if (!name.ends_with(kWeight)) continue;
      const std::string key = prefix + name;
      weights.push_back({key, LoraTarget{LoraComponent::TEXT_ENCODER, int(i), name, -1, 0}});
      clip_l_present = clip_l_present || !clip_l_layer(key).empty();
    }
  }
  for (const auto& [key, t] : weights) {
    map["text_encoders." + key.substr(0, key.size() - kWeight.size())] = t;
    if (const std::string layer = clip_l_layer(key); !layer.empty()) {
      const std::string kohya = "text_model_encoder_layers_" + lora_underscored(layer);
      map["lora_te_" + kohya] = t;
      map["lora_te1_" + kohya] = t;
      map["text_encoder.text_model.encoder.layers." + layer] = t;
    } else if (key == "clip_l.transformer.text_projection.weight") {
      map["lora_te1_text_projection"] = t;
    } else if (key.starts_with(kT5)) {
      const std::string x =
          lora_underscored(key.substr(kT5.size(), key.size() - kT5.size() - kWeight.size()));
      if (clip_l_present) {
        map["lora_te2_" + x] = t;
        map["lora_te3_" + x] = t;
      } else {
        map["lora_te1_" + x] = t;
      }
    }
  }
}

}  // namespace

Result<LoraKeyMap> flux_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text) {
  LoraKeyMap map;
  if (diffusion) {
    const auto* flux = dynamic_cast<const FluxModel*>(diffusion);
    if (!flux)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "the Flux LoRA key map needs the Flux DiT; family '{}' gave another model",
                        diffusion->family().name);
    dit_keys(map, *flux);
  }
  if (text) text_keys(map, *text);
  return map;
}

}  // namespace hr
