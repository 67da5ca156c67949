// Checkpoint inspection (components, family, prediction type) and model loading.
#include "models/checkpoint.h"

#include <array>
#include <cctype>
#include <charconv>
#include <map>

#include <fmt/format.h>

#include "models/weight_load.h"

namespace hr {

const char* model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::SD1: return "sd1";
    case ModelFamily::SD2: return "sd2";
    case ModelFamily::SDXL: return "sdxl";
    case ModelFamily::UNKNOWN: break;
  }
  return "unknown";
}

float latent_scale_factor(ModelFamily f) { return f == ModelFamily::SDXL ? 0.13025f : 0.18215f; }

const char* text_encoder_kind_name(TextEncoderKind k) {
  switch (k) {
    case TextEncoderKind::CLIP_L: return "clip_l";
    case TextEncoderKind::OPENCLIP_H: return "openclip_h";
    case TextEncoderKind::OPENCLIP_BIGG: return "openclip_bigg";
  }
  return "?";
}

std::string CheckpointInfo::str() const {
  std::string parts;
  if (has_unet) parts += fmt::format("unet '{}'", unet_prefix);
  if (has_vae) parts += fmt::format("{}vae '{}'", parts.empty() ? "" : ", ", vae_prefix);
  for (const TextEncoderPart& t : text_encoders)
    parts += fmt::format("{}{} '{}'", parts.empty() ? "" : ", ", text_encoder_kind_name(t.kind),
                         t.prefix);
  return fmt::format("{}: family {}, prediction {} ({}), stored {}, components: {}", path,
                     model_family_name(family), prediction_name(prediction), prediction_source,
                     dtype_name(storage_dtype), parts);
}

namespace {

// The keys that identify each component (LDM/SGM single-file layout, or a bare component file
// as ComfyUI's UNETLoader / VAELoader / CLIPLoader read).
constexpr const char* kUNetKey = "input_blocks.0.0.weight";
constexpr const char* kUNetPrefix = "model.diffusion_model.";
constexpr const char* kVAEKey = "decoder.conv_in.weight";
constexpr const char* kVAEPrefix = "first_stage_model.";
constexpr const char* kCLIPKey = "text_model.embeddings.token_embedding.weight";
constexpr const char* kOpenCLIPKey = "token_embedding.weight";

struct EncoderSlot {
  const char* prefix;
  TextEncoderKind kind;
  bool openclip;
};
constexpr std::array<EncoderSlot, 5> kEncoderSlots = {{
    {"cond_stage_model.transformer.", TextEncoderKind::CLIP_L, false},
    {"cond_stage_model.model.", TextEncoderKind::OPENCLIP_H, true},
    {"conditioner.embedders.0.transformer.", TextEncoderKind::CLIP_L, false},
    {"conditioner.embedders.1.model.", TextEncoderKind::OPENCLIP_BIGG, true},
    {"conditioner.embedders.0.model.", TextEncoderKind::OPENCLIP_BIGG, true},  // SDXL refiner
}};

Status unsupported(const SafetensorsFile& f) {
  std::string found;
  const auto& es = f.entries();
  for (size_t i = 0; i < es.size() && i < 6; ++i)
    found += fmt::format("{}'{}' {}", i ? ", " : "", es[i].name, es[i].shape.str());
  std::string hint;
  if (f.contains("conv_in.weight") || f.find("unet.conv_in.weight") ||
      f.find("down_blocks.0.resnets.0.conv1.weight"))
    hint = " (this looks like a diffusers-layout file, which is not supported: convert it to the "
           "original single-file layout)";
  return make_error(
      ErrorCode::UNSUPPORTED,
      "{}: not a supported Stable Diffusion checkpoint{}. Expected a UNet ('{}{}' or bare '{}'), "
      "a VAE ('{}{}' or bare '{}'), or text encoders ('cond_stage_model.transformer.{}', "
      "'cond_stage_model.model.{}', 'conditioner.embedders.0.transformer.{}', "
      "'conditioner.embedders.1.model.{}', or bare '{}' / '{}'). Found {} tensors: {}{}",
      f.path(), hint, kUNetPrefix, kUNetKey, kUNetKey, kVAEPrefix, kVAEKey, kVAEKey, kCLIPKey,
      kOpenCLIPKey, kCLIPKey, kOpenCLIPKey, kCLIPKey, kOpenCLIPKey, es.size(), found,
      es.size() > 6 ? ", ..." : "");
}

}  // namespace

Result<CheckpointInfo> checkpoint_inspect(const SafetensorsFile& f,
                                          std::optional<Prediction> prediction) {
  CheckpointInfo info;
  info.path = f.path();

  if (f.contains(std::string(kUNetPrefix) + kUNetKey)) {
    info.has_unet = true;
    info.unet_prefix = kUNetPrefix;
  } else if (f.contains(kUNetKey) && f.contains("time_embed.0.weight")) {
    info.has_unet = true;
  }
  if (f.contains(std::string(kVAEPrefix) + kVAEKey)) {
    info.has_vae = true;
    info.vae_prefix = kVAEPrefix;
  } else if (f.contains(kVAEKey) && f.contains("encoder.conv_in.weight")) {
    info.has_vae = true;
  }
  for (const EncoderSlot& s : kEncoderSlots) {
    std::string key = std::string(s.prefix) + (s.openclip ? kOpenCLIPKey : kCLIPKey);
    if (f.contains(key)) info.text_encoders.push_back({s.kind, s.prefix});
  }
  if (info.text_encoders.empty() && !info.has_unet && !info.has_vae) {
    if (f.contains(kCLIPKey)) {
      info.text_encoders.push_back({TextEncoderKind::CLIP_L, ""});
    } else if (const SafetensorsEntry* e = f.find(kOpenCLIPKey);
               e && f.contains("transformer.resblocks.0.attn.in_proj_weight")) {
      bool bigg = e->shape.rank == 2 && e->shape[1] == 1280;
      info.text_encoders.push_back(
          {bigg ? TextEncoderKind::OPENCLIP_BIGG : TextEncoderKind::OPENCLIP_H, ""});
    }
  }
  if (!info.has_unet && !info.has_vae && info.text_encoders.empty()) return unsupported(f);

  // Family from structure: SGM conditioner or an adm label embedding -> SDXL; an OpenCLIP-H
  // text encoder or linear transformer projections -> SD2; else SD1. A bare VAE says nothing.
  bool sdxl_te = false, sd2_te = false, clip_l_te = false;
  for (const TextEncoderPart& t : info.text_encoders) {
    if (t.prefix.rfind("conditioner.", 0) == 0 || t.kind == TextEncoderKind::OPENCLIP_BIGG)
      sdxl_te = true;
    else if (t.kind == TextEncoderKind::OPENCLIP_H)
      sd2_te = true;
    else
      clip_l_te = true;
  }
  if (info.has_unet) {
    const std::string& p = info.unet_prefix;
    if (sdxl_te || f.contains(p + "label_emb.0.0.weight")) {
      info.family = ModelFamily::SDXL;
    } else if (sd2_te) {
      info.family = ModelFamily::SD2;
    } else {
      // The first transformer's proj_in decides: [C, C] linear (SD2) or [C, C, 1, 1] conv (SD1).
      info.family = ModelFamily::SD1;
      for (const SafetensorsEntry& e : f.entries()) {
        if (e.name.rfind(p, 0) != 0) continue;
        if (e.name.size() >= 15 && e.name.compare(e.name.size() - 15, 15, ".proj_in.weight") == 0) {
          if (e.shape.rank == 2) info.family = ModelFamily::SD2;
          break;
        }
      }
    }
  } else if (sdxl_te) {
    info.family = ModelFamily::SDXL;
  } else if (sd2_te) {
    info.family = ModelFamily::SD2;
  } else if (clip_l_te) {
    info.family = ModelFamily::SD1;
  }

  // Prediction type (Note [model settings order]): caller override, config file, metadata,
  // ComfyUI's "v_pred" marker key, else eps.
  HR_ASSIGN_OR_RETURN(info.settings, model_settings_read(f.path(), f.metadata()));
  if (prediction) {
    info.prediction = *prediction;
    info.prediction_source = "override";
  } else if (info.settings.prediction.value) {
    info.prediction = *info.settings.prediction.value;
    info.prediction_source = info.settings.prediction.source;
  } else if (f.contains("v_pred")) {
    info.prediction = Prediction::V;
    info.prediction_source = "key v_pred";
  }

  std::map<DType, size_t> counts;
  for (const SafetensorsEntry& e : f.entries())
    if (dtype_is_float(e.dtype)) ++counts[e.dtype];
  size_t best = 0;
  for (const auto& [t, n] : counts)
    if (n > best) best = n, info.storage_dtype = t;
  return info;
}

Result<std::unique_ptr<LoadedModel>> model_load(std::shared_ptr<const SafetensorsFile> file,
                                                const LoadOptions& options) {
  HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file, options.prediction));
  auto m = std::make_unique<LoadedModel>();
  m->info = std::move(info);
  m->file = file;
  const CheckpointInfo& ci = m->info;
  if (ci.has_unet && options.load_unet) {
    HR_ASSIGN_OR_RETURN(m->unet, unet_config_detect(*file, ci.unet_prefix));
    // Head layout: caller override, else the settings (config file, metadata), else the
    // detected default (see unet_config_detect).
    std::optional<int> heads = options.num_heads, head_ch = options.num_head_channels;
    if (!heads && !head_ch) {
      heads = ci.settings.unet_num_heads.value;
      head_ch = ci.settings.unet_num_head_channels.value;
    }
    if (heads && *heads > 0) {
      m->unet.num_heads = *heads;
      m->unet.num_head_channels = -1;
    } else if (head_ch && *head_ch > 0) {
      m->unet.num_heads = -1;
      m->unet.num_head_channels = *head_ch;
    }
    m->unet_dtype = options.unet_dtype;
    HR_TRY(weights_load_prefix(m->unet_weights, file, ci.unet_prefix, options.unet_dtype)
               .with_context("loading the UNet"));
    m->has_unet = true;
  }
  if (ci.has_vae && options.load_vae) {
    HR_ASSIGN_OR_RETURN(m->vae, vae_config_detect(*file, ci.vae_prefix));
    m->vae_dtype = options.vae_dtype;
    HR_TRY(weights_load_prefix(m->vae_weights, file, ci.vae_prefix, options.vae_dtype)
               .with_context("loading the VAE"));
    m->has_vae = true;
  }
  return m;
}

Result<std::unique_ptr<LoadedModel>> model_load(const std::string& path,
                                                const LoadOptions& options) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  return model_load(std::shared_ptr<const SafetensorsFile>(std::move(f)), options);
}

Result<HostTensor> unet_run(Executor& ex, LoadedModel& model, const HostTensor& x,
                            const HostTensor& timesteps, const HostTensor& context,
                            const HostTensor* y) {
  if (!model.has_unet)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} has no UNet loaded", model.info.path);
  return unet_run(ex, model.unet, model.unet_weights, model.unet_dtype, x, timesteps, context, y);
}

Result<HostTensor> vae_decode(Executor& ex, LoadedModel& model, const HostTensor& latent) {
  if (!model.has_vae)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} has no VAE loaded", model.info.path);
  return vae_decode(ex, model.vae, model.vae_weights, model.vae_dtype, latent);
}

Result<VAEMoments> vae_encode(Executor& ex, LoadedModel& model, const HostTensor& image) {
  if (!model.has_vae)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} has no VAE loaded", model.info.path);
  return vae_encode(ex, model.vae, model.vae_weights, model.vae_dtype, image);
}

}  // namespace hr
