// Checkpoint inspection (family and components through the registry, prediction, settings) and
// model loading through the family's factories.
#include "models/checkpoint.h"

#include <map>

#include <fmt/format.h>

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

Result<std::unique_ptr<LoadedModel>> model_load(std::shared_ptr<const SafetensorsFile> file,
                                                const LoadOptions& options) {
  HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file, options.prediction));
  auto m = std::make_unique<LoadedModel>();
  m->info = std::move(info);
  m->file = file;
  const ModelFamily& fam = *m->info.family;
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
