// The SD families' LoRA key map: the UNet's stems from its weight names and its block layout,
// the CLIP encoders' stems from their weights translated to the HF names LoRA trainers use.
#include "models/sd/sd_lora_keys.h"

#include <fmt/format.h>

#include <array>
#include <optional>
#include <string_view>
#include <vector>

#include "models/lora_stems.h"
#include "models/sd/sd_text_encoder.h"
#include "models/sd/sd_unet.h"
#include "models/sd/unet_diffusers_names.h"

namespace hr {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(std::string_view s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
std::string without(std::string_view s, std::string_view suffix) {
  return std::string(s.substr(0, s.size() - suffix.size()));
}

constexpr std::string_view kWeight = ".weight";

// ---- UNet -------------------------------------------------------------------------------------

// A diffusers module path as diffusers' attention processors name it: ".to_q" ->
// ".processor.to_q", and the output projection "to_out.0" -> "processor.to_out".
std::string diffusers_processor_stem(std::string_view module) {
  std::string out;
  for (size_t i = 0; i < module.size();) {
    if (module.compare(i, 4, ".to_") == 0) {
      out += ".processor.to_";
      i += 4;
    } else {
      out += module[i++];
    }
  }
  if (ends_with(out, ".to_out.0")) out.resize(out.size() - 2);
  return out;
}

void unet_keys(LoraKeyMap& map, const SDUNet& unet) {
  auto target = [](const std::string& weight) { return lora_diffusion_target(weight); };
  // Every tensor under its own name: kohya's LDM form and the generic ComfyUI form; tensors
  // other than weights (biases) keep their suffix in the stem (a full diff ".diff_b" of them).
  lora_generic_diffusion_keys(map, unet.store);
  // The diffusers names of the block layout (Note [unet block numbering]), for the weights the
  // model has: kohya's diffusers form, SimpleTuner's LyCORIS form and diffusers' own.
  for (const UNetNamePair& p : unet_diffusers_names(unet.config)) {
    if (!ends_with(p.diffusers, kWeight) || !unet.store.contains(p.ldm)) continue;
    std::string module = without(p.diffusers, kWeight);
    std::string kohya = lora_underscored(module);
    map["lora_unet_" + kohya] = target(p.ldm);
    map["lycoris_" + kohya] = target(p.ldm);
    std::string diffusers = diffusers_processor_stem(module);
    map[diffusers] = target(p.ldm);
    map["unet." + diffusers] = target(p.ldm);
  }
}

// ---- CLIP -------------------------------------------------------------------------------------

// One tensor of an encoder in the HF CLIPTextModel names ComfyUI gives it ("text_model.encoder.
// layers.0.self_attn.q_proj.weight"), with the rows it takes of headroom's tensor.
struct HFName {
  std::string hf;
  std::string weight;  // headroom's name in the encoder's store
  int64_t row_offset = -1;
  int64_t rows = 0;
};

// OpenCLIP resblock layers and their HF names (ComfyUI's transformers_convert).
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kOpenClipLayer = {{
    {"ln_1", "layer_norm1"},
    {"ln_2", "layer_norm2"},
    {"mlp.c_fc", "mlp.fc1"},
    {"mlp.c_proj", "mlp.fc2"},
    {"attn.out_proj", "self_attn.out_proj"},
}};
constexpr std::array<std::string_view, 3> kQKV = {"self_attn.q_proj", "self_attn.k_proj",
                                                  "self_attn.v_proj"};
// ComfyUI converts the first 32 resblocks (bigG's depth); deeper ones keep OpenCLIP names.
constexpr int kOpenClipConvertedLayers = 32;

// Note [openclip lora names]
// ComfyUI converts OpenCLIP towers (SD2's H, SDXL's bigG) to HF names at load, so every LoRA
// names them that way; headroom runs them as stored. The HF q/k/v projections are row thirds of
// OpenCLIP's fused in_proj_weight [3C, C] (q first), so their stems target row slices. The
// pooled projection is the exception: HF's text_projection.weight is the transpose of
// OpenCLIP's bare text_projection (applied as x @ P), which a row slice cannot express, so its
// stems (lora_te2_text_projection, ...) are not in the map and a LoRA that patches it reports
// them as not loaded.
std::optional<std::vector<HFName>> openclip_hf_names(const std::string& name,
                                                     const WeightSet& store) {
  if (name == "token_embedding.weight")
    return std::vector<HFName>{{"text_model.embeddings.token_embedding.weight", name}};
  if (name == "positional_embedding")
    return std::vector<HFName>{{"text_model.embeddings.position_embedding.weight", name}};
  if (name == "ln_final.weight" || name == "ln_final.bias")
    return std::vector<HFName>{
        {"text_model.final_layer_norm." + name.substr(std::string_view("ln_final.").size()), name}};
  constexpr std::string_view kBlocks = "transformer.resblocks.";
  if (!starts_with(name, kBlocks)) return std::nullopt;
  size_t dot = name.find('.', kBlocks.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string index = name.substr(kBlocks.size(), dot - kBlocks.size());
  int layer = 0;
  try {
    layer = std::stoi(index);
  } catch (...) {
    return std::nullopt;
  }
  if (layer >= kOpenClipConvertedLayers) return std::nullopt;
  const std::string rest = name.substr(dot + 1);
  const std::string hf_layer = "text_model.encoder.layers." + index + ".";
  if (rest == "attn.in_proj_weight" || rest == "attn.in_proj_bias") {
    const HostTensor* t = store.find(name);
    if (!t || t->shape().rank < 1 || t->shape()[0] % 3 != 0) return std::nullopt;
    const int64_t c = t->shape()[0] / 3;
    const char* param = rest == "attn.in_proj_weight" ? "weight" : "bias";
    std::vector<HFName> out;
    for (int i = 0; i < 3; ++i)
      out.push_back({fmt::format("{}{}.{}", hf_layer, kQKV[i], param), name, i * c, c});
    return out;
  }
  for (const auto& [open, hf] : kOpenClipLayer)
    for (std::string_view param : {".weight", ".bias"})
      if (rest == std::string(open) + std::string(param))
        return std::vector<HFName>{{hf_layer + std::string(hf) + std::string(param), name}};
  return std::nullopt;
}

// An encoder's tensors under ComfyUI's HF names (tensors ComfyUI has no HF name for are left
// out: no LoRA can name them).
std::vector<HFName> encoder_hf_names(const SDClipEncoder& enc) {
  std::vector<HFName> out;
  const bool open_clip = enc.config.layout == CLIPLayout::OPEN_CLIP;
  for (const std::string& name : enc.weights->names()) {
    if (!open_clip) {
      // HF layout: ComfyUI roots the model at "text_model."; a file without that root
      // (Note [CLIP layouts]) holds the same tensors one level up.
      const std::string& root = enc.config.hf_root;
      if (starts_with(name, "text_projection."))
        out.push_back({name, name});  // beside text_model, not in it
      else if (starts_with(name, root))
        out.push_back({"text_model." + name.substr(root.size()), name});
      continue;
    }
    if (std::optional<std::vector<HFName>> hf = openclip_hf_names(name, *enc.weights))
      for (HFName& h : *hf) out.push_back(std::move(h));
  }
  return out;
}

// ComfyUI's name for an encoder in the CLIP model's state dict ("clip_l.transformer. ...").
const char* comfy_clip_name(const std::string& kind) {
  if (kind == kSDClipL) return "clip_l";
  if (kind == kSDOpenClipH) return "clip_h";
  return "clip_g";
}

// The layers kohya and diffusers name inside "text_model.encoder.layers.N." (ComfyUI's
// LORA_CLIP_MAP: the linear projections, '.' -> '_' in kohya form).
constexpr std::array<std::string_view, 6> kLoraClipLayers = {
    "mlp.fc1",          "mlp.fc2",          "self_attn.k_proj",
    "self_attn.q_proj", "self_attn.v_proj", "self_attn.out_proj"};
// ComfyUI looks for kohya/diffusers stems in the first 32 layers only.
constexpr int kLoraClipLayersSearched = 32;

// "text_model.encoder.layers.N.<layer>" with N < 32 and <layer> one of kLoraClipLayers ->
// "N_<layer with underscores>" (the kohya tail), else nullopt.
std::optional<std::string> kohya_layer_tail(std::string_view module) {
  constexpr std::string_view kLayers = "text_model.encoder.layers.";
  if (!starts_with(module, kLayers)) return std::nullopt;
  size_t dot = module.find('.', kLayers.size());
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view index = module.substr(kLayers.size(), dot - kLayers.size());
  if (index.empty() || index.size() > 2 ||
      index.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  if (std::stoi(std::string(index)) >= kLoraClipLayersSearched) return std::nullopt;
  std::string_view layer = module.substr(dot + 1);
  for (std::string_view l : kLoraClipLayers)
    if (layer == l) return std::string(index) + "_" + lora_underscored(std::string(layer));
  return std::nullopt;
}

// Note [sd clip lora prefixes]
// Which prefixes name which encoder (ComfyUI's model_lora_keys_clip): CLIP-L and OpenCLIP-H
// answer to kohya "lora_te_" and "lora_te1_" and diffusers "text_encoder."; bigG beside a
// CLIP-L (SDXL) to "lora_te2_" and "text_encoder_2.", and alone (the refiner) to "lora_te_",
// "text_encoder." and Stable Cascade's "lora_prior_te_". Every tensor also has the generic
// "text_encoders.<comfy name>.transformer.<HF name>" stem.
struct ClipPrefixes {
  std::vector<std::string> kohya;
  std::vector<std::string> diffusers;
};

ClipPrefixes clip_prefixes(const std::string& kind, bool clip_l_present) {
  if (kind != kSDOpenClipBigG) return {{"lora_te_", "lora_te1_"}, {"text_encoder."}};
  if (clip_l_present) return {{"lora_te2_"}, {"text_encoder_2."}};
  return {{"lora_te_", "lora_prior_te_"}, {"text_encoder."}};
}

void encoder_keys(LoraKeyMap& map, const SDClipEncoder& enc, int index, bool clip_l_present) {
  const std::string comfy = comfy_clip_name(enc.kind);
  const ClipPrefixes prefixes = clip_prefixes(enc.kind, clip_l_present);
  for (const HFName& h : encoder_hf_names(enc)) {
    if (!ends_with(h.hf, kWeight)) continue;
    const LoraTarget t{LoraComponent::TEXT_ENCODER, index, h.weight, h.row_offset, h.rows};
    const std::string module = without(h.hf, kWeight);
    map[fmt::format("text_encoders.{}.transformer.{}", comfy, module)] = t;
    if (std::optional<std::string> tail = kohya_layer_tail(module)) {
      for (const std::string& p : prefixes.kohya) map[p + "text_model_encoder_layers_" + *tail] = t;
      for (const std::string& p : prefixes.diffusers) map[p + module] = t;
    }
    // OneTrainer names CLIP-L's projection (Note [openclip lora names] for bigG's).
    if (enc.kind == kSDClipL && module == "text_projection") map["lora_te1_text_projection"] = t;
  }
}

bool has_kohya_layers(const SDClipEncoder& enc) {
  for (const HFName& h : encoder_hf_names(enc))
    if (ends_with(h.hf, kWeight) && kohya_layer_tail(without(h.hf, kWeight))) return true;
  return false;
}

void text_keys(LoraKeyMap& map, const SDTextEncoder& text) {
  const std::vector<SDClipEncoder>& encoders = text.encoders();
  bool clip_l_present = false;
  for (const SDClipEncoder& e : encoders)
    if (e.kind == kSDClipL && has_kohya_layers(e)) clip_l_present = true;
  for (size_t i = 0; i < encoders.size(); ++i)
    encoder_keys(map, encoders[i], int(i), clip_l_present);
}

}  // namespace

Result<LoraKeyMap> sd_lora_keys(const DiffusionModel* diffusion, const TextEncoder* text) {
  LoraKeyMap map;
  if (diffusion) {
    const auto* unet = dynamic_cast<const SDUNet*>(diffusion);
    if (!unet)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "the SD LoRA key map needs the SD UNet; family '{}' gave another model",
                        diffusion->family().name);
    unet_keys(map, *unet);
  }
  if (text) {
    const auto* sd_text = dynamic_cast<const SDTextEncoder*>(text);
    if (!sd_text)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "the SD LoRA key map needs the SD text encoder; family '{}' gave another",
                        text->family().name);
    text_keys(map, *sd_text);
  }
  return map;
}

}  // namespace hr
