// The Flux.1 families as data (ComfyUI a125cd84 comfy/supported_models.py Flux / FluxSchnell /
// FluxInpaint, comfy/model_detection.py): detection of a BFL diffusion-model file and of a
// single-file checkpoint, latent format, model sampling, text-encoder kinds and factories.
#include "models/flux/flux_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "models/checkpoint.h"
#include "models/flux/flux_lora_keys.h"
#include "models/flux/flux_model.h"
#include "models/flux/flux_text_encoder.h"
#include "models/flux/flux_vae_make.h"
#include "models/latent_formats.h"
#include "models/sd/sd_vae.h"

namespace hr {
namespace {

// model_detection.py detect_unet_config: Flux has these two under the diffusion prefix.
constexpr const char* kDiTKey = "double_blocks.0.img_attn.norm.key_norm.scale";
constexpr const char* kDiTInKey = "img_in.weight";
constexpr const char* kGuidanceKey = "guidance_in.in_layer.weight";
constexpr const char* kChromaKey = "distilled_guidance_layer.";
// The single-file prefixes: BASE's unet prefix, Flux's vae_key_prefix (kFluxVAEPrefix) and
// text_encoder_key_prefix, under which flux_clip keeps clip_l.transformer. and
// t5xxl.transformer. (comfy/text_encoders/flux.py; kFluxClipLPrefix, kFluxT5XXLPrefix).
constexpr const char* kDiTPrefix = "model.diffusion_model.";
constexpr const char* kVAEKey = "decoder.conv_in.weight";
constexpr const char* kClipLKey = "text_model.embeddings.token_embedding.weight";
constexpr const char* kT5Key = "encoder.final_layer_norm.weight";

enum class FluxVariant : uint8_t { DEV, SCHNELL };

bool has_prefixed(const SafetensorsFile& f, const std::string& prefix) {
  for (const SafetensorsEntry& e : f.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

// Note [flux variants]
// A Flux DiT is a file with the QK norm of the first double block and img_in under "" (BFL's
// flux1-dev.safetensors, what UNETLoader reads) or "model.diffusion_model." (a single file,
// CheckpointLoaderSimple). ComfyUI tells dev from schnell by guidance_in (Flux: guidance_embed
// True, ModelType.FLUX; FluxSchnell: False, ModelType.FLOW with shift 1, multiplier 1), so the
// two are registry entries of their own with their sampling as data. Fill (FluxInpaint, img_in
// 384 = 96 channels x 2 x 2) and the Canny/Depth control models (128) detect as dev here and
// are refused by the factory by name (flux_model_create): their extra channels are image
// conditioning (concat_cond) from nodes headroom lacks. Kontext has dev's keys and shapes; it
// differs only by the reference latents of its conditioning, which FluxModel refuses by name.
// Chroma (distilled_guidance_layer) is another model that ComfyUI detects from the same keys;
// it is not one of these families.
std::optional<FamilyMatch> flux_detect(const SafetensorsFile& f, FluxVariant want) {
  std::optional<std::string> prefix;
  for (const char* p : {kDiTPrefix, ""})
    if (f.contains(std::string(p) + kDiTKey) && f.contains(std::string(p) + kDiTInKey)) {
      prefix = p;
      break;
    }
  if (!prefix || has_prefixed(f, *prefix + kChromaKey)) return std::nullopt;
  const FluxVariant v =
      f.contains(*prefix + kGuidanceKey) ? FluxVariant::DEV : FluxVariant::SCHNELL;
  if (v != want) return std::nullopt;
  FamilyMatch m;
  m.diffusion_prefix = *prefix;
  if (f.contains(std::string(kFluxVAEPrefix) + kVAEKey)) m.vae_prefix = kFluxVAEPrefix;
  if (f.contains(std::string(kFluxClipLPrefix) + kClipLKey))
    m.text_encoders.push_back({kFluxClipL, kFluxClipLPrefix});
  if (f.contains(std::string(kFluxT5XXLPrefix) + kT5Key))
    m.text_encoders.push_back({kFluxT5XXL, kFluxT5XXLPrefix});
  return m;
}

std::string flux_expected_keys() {
  return fmt::format(
      "a Flux diffusion model ('{}' and '{}', bare or under '{}'), with a VAE under '{}' and "
      "text encoders under '{}' / '{}' in a single file",
      kDiTKey, kDiTInKey, kDiTPrefix, kFluxVAEPrefix, kFluxClipLPrefix, kFluxT5XXLPrefix);
}

std::string flux_unsupported_hint(const SafetensorsFile& f) {
  if (f.contains("x_embedder.weight") || f.contains("transformer.x_embedder.weight"))
    return " (this looks like a diffusers-layout Flux transformer, which is not supported: use "
           "the BFL layout, e.g. flux1-dev.safetensors)";
  if (has_prefixed(f, kChromaKey) || has_prefixed(f, std::string(kDiTPrefix) + kChromaKey))
    return " (this looks like Chroma, which is not supported)";
  return "";
}

// What the tensors cannot show: the model sampling the family implies and the RoPE axes
// (Note [flux rope axes] in flux_model.cpp).
std::vector<std::pair<std::string, std::string>> flux_settings_describe(
    const SafetensorsFile& file, const CheckpointInfo& info) {
  std::vector<std::pair<std::string, std::string>> lines;
  const ModelSamplingSpec& s = info.family->sampling;
  if (s.kind == ModelSamplingSpec::Kind::FLUX)
    lines.push_back({"model sampling",
                     fmt::format("flux, shift {} (ComfyUI's Flux: guidance_in present)", s.shift)});
  else
    lines.push_back({"model sampling", fmt::format("flow, shift {}, multiplier {} (ComfyUI's "
                                                   "FluxSchnell: no guidance_in)",
                                                   s.shift, s.multiplier)});
  const ModelSetting<std::vector<int>>& axes = info.settings.flux_axes_dim;
  if (info.has_diffusion && axes.value) {
    lines.push_back({"RoPE axes",
                     fmt::format("[{}] ({})", fmt::join(*axes.value, ", "), axes.source)});
  } else if (info.has_diffusion) {
    Result<FluxConfig> c = flux_config_detect(file, info.diffusion_prefix);
    lines.push_back({"RoPE axes", !c.ok() || !c->axes_dim.empty()
                                      ? std::string("[16, 56, 56] (Flux's)")
                                      : fmt::format("none: the heads are {} wide and Flux's 16/56/56 "
                                                    "fit 128 (state headroom.flux.axes_dim)",
                                                    c->head_dim())});
  }
  for (size_t i = 0; i < info.text_encoders.size(); ++i)
    if (int h = info.settings.text_encoder_heads_at(i); h > 0)
      lines.push_back({fmt::format("{} heads", info.text_encoders[i].kind),
                       fmt::format("{} ({})", h, info.settings.text_encoder_heads.source)});
  return lines;
}

ModelFamily flux_family_make(const char* name, FluxVariant variant, ModelSamplingSpec sampling) {
  ModelFamily f;
  f.name = name;
  f.display_name = "Flux.1";
  f.diffusion_name = "dit";
  f.detect = [variant](const SafetensorsFile& file) { return flux_detect(file, variant); };
  f.expected_keys = flux_expected_keys();
  f.unsupported_hint = flux_unsupported_hint;
  f.settings_describe = flux_settings_describe;
  f.latent = latent_format_flux();
  f.inference_dtypes = {DType::BF16, DType::F16, DType::F32};  // ComfyUI's Flux
  f.sampling = sampling;
  f.text_encoder_kinds = {kFluxClipL, kFluxT5XXL};
  f.diffusion_create = flux_model_create;
  // The Flux autoencoder is the LDM AutoencoderKL with 16 latent channels and no quant convs:
  // the SD VAE's factory reads its configuration from the tensors.
  f.autoencoder_create = sd_vae_create;
  f.text_encoder_create = flux_text_encoder_create;
  f.lora_keys = flux_lora_keys;
  return f;
}

}  // namespace

const std::vector<const ModelFamily*>& flux_families() {
  // supported_models.py: Flux has no sampling_settings (ModelSamplingFlux's shift 1.15);
  // FluxSchnell's are multiplier 1, shift 1 on ModelSamplingDiscreteFlow. Both predict CONST.
  static const ModelFamily dev = flux_family_make(
      "flux", FluxVariant::DEV,
      ModelSamplingSpec{ModelSamplingSpec::Kind::FLUX, Prediction::EPS, 1.15, 1.0});
  static const ModelFamily schnell =
      flux_family_make("flux-schnell", FluxVariant::SCHNELL,
                       ModelSamplingSpec{ModelSamplingSpec::Kind::FLOW, Prediction::EPS, 1.0, 1.0});
  static const std::vector<const ModelFamily*> families = {&dev, &schnell};
  return families;
}

}  // namespace hr
