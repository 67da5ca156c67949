// The Z-Image LoRA key map: every DiT weight under ComfyUI's generic and kohya stems, and the
// diffusers ZImageTransformer2DModel names (ComfyUI's z_image_to_diffusers) in four dialects,
// diffusers' to_q/to_k/to_v as row thirds of the fused attention.qkv.
#include "models/zimage/zimage_lora_keys.h"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <vector>

#include "models/lora_stems.h"
#include "models/text_encoder.h"
#include "models/zimage/zimage_model.h"

namespace hr {
namespace {

// Note [zimage lora keys]
// headroom keeps the Z-Image DiT under the original checkpoint's names (ComfyUI's Lumina2
// NextDiT names: layers.N.attention.qkv, attention.out, feed_forward.w1/w2/w3, x_embedder, ...)
// with the same layouts, so ComfyUI's "diffusion_model.X" is headroom's X. ComfyUI's
// model_lora_keys_unet (newer than a125cd84; its Lumina2 branch and comfy/utils.py
// z_image_to_diffusers, from public copies of ComfyUI's code) gives such a model:
//  - every tensor X: "diffusion_model.X" (a weight without ".weight") and for weights
//    "lora_unet_" + X with '.' -> '_' (the generic stems every model gets);
//  - every diffusers weight name D of z_image_to_diffusers: "diffusion_model.D",
//    "transformer.D", "lycoris_" + D ('.' -> '_') and D itself. D is, in every block of layers,
//    context_refiner and noise_refiner: attention.to_q/to_k/to_v (row thirds [0,H), [H,2H),
//    [2H,3H) of attention.qkv, H = dim), attention.to_out.0 (attention.out), attention.norm_q /
//    norm_k (q_norm / k_norm), and attention_norm1/2, ffn_norm1/2, feed_forward.w1/w2/w3,
//    adaLN_modulation.0 under their own names; and all_x_embedder.2-1 (x_embedder),
//    all_final_layer.2-1.linear / .adaLN_modulation.1 (final_layer.*), cap_embedder.0/1,
//    t_embedder.mlp.0/2.
// z_image_to_diffusers also names an adaLN_modulation.0 in the context refiner, which has none:
// stems of tensors the model lacks are not in the map. The Qwen3 text encoder gets the stems
// model_lora_keys_clip gives every text encoder: "text_encoders." + its ComfyUI key
// ("qwen3_4b.transformer.<name>") without ".weight", for every weight; newer ComfyUI's
// Qwen-specific dialects, if any, are not mapped.
// A block's diffusers names that are its own tensor's (z_image_to_diffusers' block_map).
constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kBlock = {{
    {"attention.norm_q", "attention.q_norm.weight"},
    {"attention.norm_k", "attention.k_norm.weight"},
    {"attention.to_out.0", "attention.out.weight"},
    {"attention_norm1", "attention_norm1.weight"},
    {"attention_norm2", "attention_norm2.weight"},
    {"feed_forward.w1", "feed_forward.w1.weight"},
    {"feed_forward.w2", "feed_forward.w2.weight"},
    {"feed_forward.w3", "feed_forward.w3.weight"},
    {"ffn_norm1", "ffn_norm1.weight"},
    {"ffn_norm2", "ffn_norm2.weight"},
    {"adaLN_modulation.0", "adaLN_modulation.0.weight"},
}};

// Its MAP_BASIC weights.
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kBasic = {{
    {"all_final_layer.2-1.linear", "final_layer.linear.weight"},
    {"all_final_layer.2-1.adaLN_modulation.1", "final_layer.adaLN_modulation.1.weight"},
    {"all_x_embedder.2-1", "x_embedder.weight"},
    {"cap_embedder.0", "cap_embedder.0.weight"},
    {"cap_embedder.1", "cap_embedder.1.weight"},
    {"t_embedder.mlp.0", "t_embedder.mlp.0.weight"},
    {"t_embedder.mlp.2", "t_embedder.mlp.2.weight"},
}};

void block_names(std::vector<LoraDiffusersName>& out, const std::string& block, int64_t dim) {
  constexpr std::array<std::string_view, 3> kQKV = {"to_q", "to_k", "to_v"};
  for (int j = 0; j < 3; ++j)
    out.push_back({fmt::format("{}.attention.{}", block, kQKV[j]), block + ".attention.qkv.weight",
                   j * dim, dim});
  for (const auto& [d, w] : kBlock)
    out.push_back({fmt::format("{}.{}", block, d), fmt::format("{}.{}", block, w)});
}

std::vector<LoraDiffusersName> zimage_diffusers_names(const ZImageConfig& c) {
  std::vector<LoraDiffusersName> out;
  for (int i = 0; i < c.n_layers; ++i) block_names(out, fmt::format("layers.{}", i), c.dim);
  for (const char* stack : {"context_refiner", "noise_refiner"})
    for (int i = 0; i < c.n_refiner_layers; ++i)
      block_names(out, fmt::format("{}.{}", stack, i), c.dim);
  for (const auto& [d, w] : kBasic) out.push_back({std::string(d), std::string(w)});
  return out;
}

void dit_keys(LoraKeyMap& map, const ZImageModel& z) {
  lora_generic_diffusion_keys(map, z.store);
  for (const LoraDiffusersName& d : zimage_diffusers_names(z.config)) {
    if (!z.store.contains(d.weight)) continue;
    const LoraTarget t = lora_diffusion_target(d.weight, d.row_offset, d.rows);
    map["diffusion_model." + d.diffusers] = t;
    map["transformer." + d.diffusers] = t;
    map["lycoris_" + lora_underscored(d.diffusers)] = t;
    map[d.diffusers] = t;
  }
}

void text_keys(LoraKeyMap& map, const TextEncoder& text) {
  constexpr std::string_view kWeight = ".weight";
  const std::vector<std::shared_ptr<WeightSet>> stores = text.stores();
  for (size_t i = 0; i < stores.size(); ++i) {
    if (!stores[i]) continue;
    const std::string prefix = "text_encoders." + text.comfy_key_prefix(i);
    for (const std::string& name : stores[i]->names())
      if (name.ends_with(kWeight))
        map[prefix + name.substr(0, name.size() - kWeight.size())] =
            LoraTarget{LoraComponent::TEXT_ENCODER, int(i), name, -1, 0};
  }
}

}  // namespace

Result<LoraKeyMap> zimage_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text) {
  LoraKeyMap map;
  if (diffusion) {
    const auto* z = dynamic_cast<const ZImageModel*>(diffusion);
    if (!z)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "the Z-Image LoRA key map needs the Z-Image DiT; family '{}' gave another "
                        "model",
                        diffusion->family().name);
    dit_keys(map, *z);
  }
  if (text) text_keys(map, *text);
  return map;
}

}  // namespace hr
