// Checkpoint inspection (family and components through the registry, prediction, settings) and
// model loading through the family's factories.
#include "models/checkpoint.h"

#include <fmt/format.h>

#include <map>

#include "models/weight_load.h"

namespace hr {

std::string CheckpointInfo::family_name() const {
  return family && family_known ? family->name : "unknown";
}

std::string CheckpointInfo::str() const {
  std::string parts;
  if (has_diffusion)
    parts += fmt::format("{} '{}'", family ? family->diffusion_name : "diffusion model",
                         diffusion_prefix);
  if (has_vae) parts += fmt::format("{}vae '{}'", parts.empty() ? "" : ", ", vae_prefix);
  for (const TextEncoderPart& t : text_encoders)
    parts += fmt::format("{}{} '{}'", parts.empty() ? "" : ", ", t.kind, t.prefix);
  return fmt::format("{}: family {}, prediction {} ({}), stored {}, components: {}", path,
                     family_name(), prediction_name(prediction), prediction_source,
                     dtype_name(storage_dtype), parts);
}

Result<CheckpointInfo> checkpoint_inspect(const SafetensorsFile& f,
                                          std::optional<Prediction> prediction) {
  HR_ASSIGN_OR_RETURN(FamilyDetected d, model_family_detect(f));
  CheckpointInfo info;
  info.path = f.path();
  info.family = d.family;
  info.family_known = d.match.family_known;
  info.has_diffusion = d.match.diffusion_prefix.has_value();
  info.diffusion_prefix = d.match.diffusion_prefix.value_or("");
  info.has_vae = d.match.vae_prefix.has_value();
  info.vae_prefix = d.match.vae_prefix.value_or("");
  info.text_encoders = std::move(d.match.text_encoders);
  info.prediction = d.family->sampling.prediction;

  // Prediction type (Note [model settings order]): caller override, config file, metadata,
  // ComfyUI's "v_pred" marker key, else the family's default.
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

// Note [family compute dtype]
// ComfyUI runs a diffusion model in the first of its family's supported_inference_dtypes the
// device supports (model_management.unet_dtype): SD1/SDXL in f16, Flux.1 and Z-Image in bf16 on
// a GPU with bf16 (sm_80 and later; f16 is not even in Z-Image's list), f32 on the CPU. headroom's
// `--dtype auto` picks f16 on a GPU for the run (backend_open.h); the diffusion model of a family
// whose list puts bf16 before f16 then computes in bf16 instead. That is also the dtype of the
// released files (flux1-dev.safetensors, z_image_turbo_bf16.safetensors), so their weights load
// as views of the file (Note [mapped weights]) instead of 12-24 GB converted to f16 at load
// (52 s of UNETLoader for Flux.1-dev on the H200, 2026-12-04). An explicit --dtype is kept.
DType diffusion_dtype_for(const ModelFamily& fam, const LoadOptions& o) {
  if (!o.diffusion_dtype_auto || o.diffusion_dtype != DType::F16) return o.diffusion_dtype;
  for (DType d : fam.inference_dtypes)
    if (d == DType::F16 || d == DType::BF16) return d;
  return o.diffusion_dtype;
}

Result<std::unique_ptr<LoadedModel>> model_load(std::shared_ptr<const SafetensorsFile> file,
                                                const LoadOptions& requested) {
  HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file, requested.prediction));
  auto m = std::make_unique<LoadedModel>();
  m->info = std::move(info);
  m->file = file;
  const ModelFamily& fam = *m->info.family;
  LoadOptions options = requested;
  options.diffusion_dtype = diffusion_dtype_for(fam, requested);
  const ComponentLoad load{file, m->info, options};
  if (m->info.has_diffusion && options.load_diffusion) {
    if (!fam.diffusion_create)
      return make_error(ErrorCode::UNSUPPORTED, "{}: family {} cannot load its diffusion model",
                        file->path(), fam.name);
    HR_ASSIGN_OR_RETURN(m->diffusion, fam.diffusion_create(load));
  }
  if (m->info.has_vae && options.load_vae) {
    if (!fam.autoencoder_create)
      return make_error(ErrorCode::UNSUPPORTED, "{}: family {} cannot load its VAE", file->path(),
                        fam.name);
    HR_ASSIGN_OR_RETURN(m->vae, fam.autoencoder_create(load));
  }
  return m;
}

Result<std::unique_ptr<LoadedModel>> model_load(const std::string& path,
                                                const LoadOptions& options) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  return model_load(std::shared_ptr<const SafetensorsFile>(std::move(f)), options);
}

Result<std::unique_ptr<TextEncoder>> text_encoder_load(std::shared_ptr<const SafetensorsFile> file,
                                                       const CheckpointInfo& info,
                                                       const LoadOptions& options) {
  if (info.text_encoders.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} holds no text encoder", file->path());
  if (!info.family->text_encoder_create)
    return make_error(ErrorCode::UNSUPPORTED, "{}: family {} cannot load its text encoders",
                      file->path(), info.family->name);
  return info.family->text_encoder_create(ComponentLoad{file, info, options});
}

}  // namespace hr
