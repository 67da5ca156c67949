// The Stable Diffusion families as data: detection from the LDM/SGM single-file layout (or bare
// component files, as ComfyUI's UNETLoader / VAELoader / CLIPLoader read), latent formats, model
// sampling, text-encoder kinds, the component factories and the LoRA key map.
#include "models/sd/sd_family.h"

#include "models/checkpoint.h"

#include <array>

#include <fmt/format.h>

#include "models/sd/sd_lora_keys.h"
#include "models/sd/sd_text_encoder.h"
#include "models/sd/sd_unet.h"
#include "models/sd/sd_vae.h"

namespace hr {
namespace {

// The keys that identify each component.
constexpr const char* kUNetKey = "input_blocks.0.0.weight";
constexpr const char* kUNetPrefix = "model.diffusion_model.";
constexpr const char* kVAEKey = "decoder.conv_in.weight";
constexpr const char* kVAEPrefix = "first_stage_model.";
constexpr const char* kCLIPKey = "text_model.embeddings.token_embedding.weight";
constexpr const char* kOpenCLIPKey = "token_embedding.weight";

struct EncoderSlot {
  const char* prefix;
  const char* kind;
  bool openclip;
};
constexpr std::array<EncoderSlot, 5> kEncoderSlots = {{
    {"cond_stage_model.transformer.", kSDClipL, false},
    {"cond_stage_model.model.", kSDOpenClipH, true},
    {"conditioner.embedders.0.transformer.", kSDClipL, false},
    {"conditioner.embedders.1.model.", kSDOpenClipBigG, true},
    {"conditioner.embedders.0.model.", kSDOpenClipBigG, true},  // SDXL refiner
}};

enum class SDVariant : uint8_t { NONE = 0, SD1, SD2, SDXL };

// Note [sd detection]
// The components first (a prefixed single file, else a bare component file), then the variant
// from structure: an SGM conditioner or an adm label embedding -> SDXL; an OpenCLIP-H text
// encoder or linear transformer projections -> SD2; else SD1. A bare VAE says nothing (NONE):
// the sd1 entry, last of the three, loads it and the file's family reads "unknown". Each entry
// runs this same function and accepts its own variant, so the registry order sdxl, sd2, sd1
// gives one answer per file.
struct SDDetection {
  FamilyMatch match;
  SDVariant variant = SDVariant::NONE;
};

std::optional<SDDetection> sd_detect(const SafetensorsFile& f) {
  SDDetection d;
  FamilyMatch& m = d.match;
  if (f.contains(std::string(kUNetPrefix) + kUNetKey))
    m.diffusion_prefix = kUNetPrefix;
  else if (f.contains(kUNetKey) && f.contains("time_embed.0.weight"))
    m.diffusion_prefix = "";
  if (f.contains(std::string(kVAEPrefix) + kVAEKey))
    m.vae_prefix = kVAEPrefix;
  else if (f.contains(kVAEKey) && f.contains("encoder.conv_in.weight"))
    m.vae_prefix = "";
  for (const EncoderSlot& s : kEncoderSlots) {
    std::string key = std::string(s.prefix) + (s.openclip ? kOpenCLIPKey : kCLIPKey);
    if (f.contains(key)) m.text_encoders.push_back({s.kind, s.prefix});
  }
  if (m.text_encoders.empty() && !m.diffusion_prefix && !m.vae_prefix) {
    if (f.contains(kCLIPKey)) {
      m.text_encoders.push_back({kSDClipL, ""});
    } else if (const SafetensorsEntry* e = f.find(kOpenCLIPKey);
               e && f.contains("transformer.resblocks.0.attn.in_proj_weight")) {
      bool bigg = e->shape.rank == 2 && e->shape[1] == 1280;
      m.text_encoders.push_back({bigg ? kSDOpenClipBigG : kSDOpenClipH, ""});
    }
  }
  if (!m.diffusion_prefix && !m.vae_prefix && m.text_encoders.empty()) return std::nullopt;

  bool sdxl_te = false, sd2_te = false, clip_l_te = false;
  for (const TextEncoderPart& t : m.text_encoders) {
    if (t.prefix.rfind("conditioner.", 0) == 0 || t.kind == kSDOpenClipBigG)
      sdxl_te = true;
    else if (t.kind == kSDOpenClipH)
      sd2_te = true;
    else
      clip_l_te = true;
  }
  if (m.diffusion_prefix) {
    const std::string& p = *m.diffusion_prefix;
    if (sdxl_te || f.contains(p + "label_emb.0.0.weight")) {
      d.variant = SDVariant::SDXL;
    } else if (sd2_te) {
      d.variant = SDVariant::SD2;
    } else {
      // The first transformer's proj_in decides: [C, C] linear (SD2) or [C, C, 1, 1] conv (SD1).
      d.variant = SDVariant::SD1;
      for (const SafetensorsEntry& e : f.entries()) {
        if (e.name.rfind(p, 0) != 0) continue;
        if (e.name.size() >= 15 && e.name.compare(e.name.size() - 15, 15, ".proj_in.weight") == 0) {
          if (e.shape.rank == 2) d.variant = SDVariant::SD2;
          break;
        }
      }
    }
  } else if (sdxl_te) {
    d.variant = SDVariant::SDXL;
  } else if (sd2_te) {
    d.variant = SDVariant::SD2;
  } else if (clip_l_te) {
    d.variant = SDVariant::SD1;
  }
  return d;
}

std::string sd_unsupported_hint(const SafetensorsFile& f) {
  if (f.contains("conv_in.weight") || f.find("unet.conv_in.weight") ||
      f.find("down_blocks.0.resnets.0.conv1.weight"))
    return " (this looks like a diffusers-layout file, which is not supported: convert it to the "
           "original single-file layout)";
  return "";
}

std::string sd_expected_keys() {
  return fmt::format(
      "a UNet ('{}{}' or bare '{}'), a VAE ('{}{}' or bare '{}'), or text encoders "
      "('cond_stage_model.transformer.{}', 'cond_stage_model.model.{}', "
      "'conditioner.embedders.0.transformer.{}', 'conditioner.embedders.1.model.{}', or bare "
      "'{}' / '{}')",
      kUNetPrefix, kUNetKey, kUNetKey, kVAEPrefix, kVAEKey, kVAEKey, kCLIPKey, kOpenCLIPKey,
      kCLIPKey, kOpenCLIPKey, kCLIPKey, kOpenCLIPKey);
}

// Note [latent2rgb factors] (sampling/latent_preview.cpp): comfy/latent_formats.py SD15, SDXL.
LatentFormat sd15_latent() {
  return {4,
          0.18215f,
          {{{0.3512f, 0.2297f, 0.3227f},
            {0.3250f, 0.4974f, 0.2350f},
            {-0.2829f, 0.1762f, 0.2721f},
            {-0.2120f, -0.2616f, -0.7177f}}},
          {0.f, 0.f, 0.f}};
}
LatentFormat sdxl_latent() {
  return {4,
          0.13025f,
          {{{0.3651f, 0.4232f, 0.4341f},
            {-0.2533f, -0.0042f, 0.1068f},
            {0.1076f, 0.1111f, -0.0362f},
            {-0.3165f, -0.2492f, -0.2188f}}},
          {0.1084f, -0.0175f, -0.0011f}};
}

// The UNet's and the CLIP encoders' heads and where each came from: the settings (config file,
// metadata), else the rule detection applies (unet_config_detect, clip_text_detect).
std::vector<std::pair<std::string, std::string>> sd_settings_describe(const SafetensorsFile& f,
                                                                      const CheckpointInfo& info) {
  std::vector<std::pair<std::string, std::string>> lines;
  const ModelSettings& s = info.settings;
  if (info.has_diffusion) {
    std::string heads, from;
    if (s.unet_num_heads.value) {
      heads = fmt::format("num_heads {}", *s.unet_num_heads.value);
      from = s.unet_num_heads.source;
    } else if (s.unet_num_head_channels.value) {
      heads = fmt::format("num_head_channels {}", *s.unet_num_head_channels.value);
      from = s.unet_num_head_channels.source;
    } else if (Result<UNetConfig> c = unet_config_detect(f, info.diffusion_prefix); c.ok()) {
      heads = c->num_heads > 0 ? fmt::format("num_heads {}", c->num_heads)
                               : fmt::format("num_head_channels {}", c->num_head_channels);
      from = "detected from the projection kind";
    }
    lines.push_back({"unet heads", fmt::format("{} ({})", heads, from)});
  }
  for (size_t i = 0; i < info.text_encoders.size(); ++i) {
    const TextEncoderPart& t = info.text_encoders[i];
    std::string label = fmt::format("{} heads", t.kind);
    if (int h = s.text_encoder_heads_at(i); h > 0) {
      lines.push_back({label, fmt::format("{} ({})", h, s.text_encoder_heads.source)});
      continue;
    }
    // Header only: the same rule clip_text_detect applies when nothing states the heads.
    if (Result<CLIPTextConfig> c = clip_text_detect(f, t.prefix, DType::F32); c.ok())
      lines.push_back({label, fmt::format("{} (detected: width {} / 64)", c->heads, c->width)});
  }
  return lines;
}

ModelFamily sd_family_make(const char* name, SDVariant variant, LatentFormat latent,
                           SDClipDefaults clip, std::vector<std::string> kinds) {
  ModelFamily f;
  f.name = name;
  f.display_name = "Stable Diffusion";
  f.diffusion_name = "unet";
  f.detect = [variant](const SafetensorsFile& file) -> std::optional<FamilyMatch> {
    std::optional<SDDetection> d = sd_detect(file);
    if (!d) return std::nullopt;
    if (d->variant == SDVariant::NONE && variant == SDVariant::SD1) {
      d->match.family_known = false;
      return d->match;
    }
    if (d->variant != variant) return std::nullopt;
    return d->match;
  };
  f.expected_keys = sd_expected_keys();
  f.unsupported_hint = sd_unsupported_hint;
  f.settings_describe = sd_settings_describe;
  f.latent = std::move(latent);
  f.sampling = ModelSamplingSpec{};  // discrete, eps (ComfyUI's ModelSamplingDiscrete)
  f.text_encoder_kinds = std::move(kinds);
  f.diffusion_create = sd_unet_create;
  f.autoencoder_create = sd_vae_create;
  f.text_encoder_create = [clip](const ComponentLoad& load) {
    return sd_text_encoder_create(load, clip);
  };
  f.lora_keys = sd_lora_keys;
  return f;
}

}  // namespace

const std::vector<const ModelFamily*>& sd_families() {
  // ComfyUI sd1_clip.py / sd2_clip.py / sdxl_clip.py: default layer, final norm, padding.
  static const ModelFamily sdxl =
      sd_family_make("sdxl", SDVariant::SDXL, sdxl_latent(), SDClipDefaults{-2, false, true, false},
                     {kSDClipL, kSDOpenClipBigG});
  static const ModelFamily sd2 =
      sd_family_make("sd2", SDVariant::SD2, sd15_latent(), SDClipDefaults{-2, true, false, false},
                     {kSDOpenClipH});
  static const ModelFamily sd1 =
      sd_family_make("sd1", SDVariant::SD1, sd15_latent(), SDClipDefaults{-1, true, true, true},
                     {kSDClipL});
  static const std::vector<const ModelFamily*> families = {&sdxl, &sd2, &sd1};
  return families;
}

}  // namespace hr
