// The Z-Image family as data (ComfyUI's newer comfy/supported_models.py ZImage(Lumina2),
// comfy/model_detection.py's Lumina2 rule): detection of a diffusion-model file and of a
// single-file checkpoint, latent format, model sampling, text-encoder kind and factories.
#include "models/zimage/zimage_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "models/checkpoint.h"
#include "models/latent_formats.h"
#include "models/llm/llm_config.h"
#include "models/sd/sd_vae.h"
#include "models/zimage/zimage_config.h"
#include "models/zimage/zimage_lora_keys.h"
#include "models/zimage/zimage_model.h"
#include "models/zimage/zimage_text_encoder.h"

namespace hr {
namespace {

// Note [z-image detection]
// ComfyUI detects Lumina2's NextDiT by "cap_embedder.1.weight" under the diffusion prefix, and
// Z-Image among those by its width (dim 3840, cap_embedder.1's rows) and the pad tokens Lumina
// Image 2.0 lacks. headroom's tiny test models have other widths, so the pad token
// "x_pad_token" (Z-Image's, absent from Lumina2's NextDiT at a125cd84) tells Z-Image here; a
// Lumina2 file (cap_embedder without x_pad_token) is refused with a hint. The prefixes are
// ComfyUI's: "" in z_image_turbo_bf16.safetensors (UNETLoader), "model.diffusion_model." in a
// single file, whose VAE is under Lumina2's vae_key_prefix "vae." and whose Qwen3-4B under
// kZImageQwen3Prefix.
constexpr const char* kDiTKey = "cap_embedder.1.weight";
constexpr const char* kPadKey = "x_pad_token";
constexpr const char* kDiTPrefix = "model.diffusion_model.";
constexpr const char* kVAEPrefix = "vae.";
constexpr const char* kVAEKey = "decoder.conv_in.weight";
constexpr const char* kQwenKey = "model.embed_tokens.weight";
constexpr const char* kQwenQKNormKey = "model.layers.0.self_attn.q_norm.weight";

std::optional<std::string> dit_prefix(const SafetensorsFile& f) {
  for (const char* p : {kDiTPrefix, ""})
    if (f.contains(std::string(p) + kDiTKey) && f.contains(std::string(p) + kPadKey)) return p;
  return std::nullopt;
}

// Note [z-image text encoder file]
// A file holding only a Qwen3 model in HF names ("model.embed_tokens.weight" and Qwen3's QK norm
// "model.layers.0.self_attn.q_norm.weight", bare as in ComfyUI's qwen_3_4b.safetensors or under
// one prefix) is Z-Image's text encoder, what CLIPLoader type lumina2 loads. ComfyUI also reads
// Qwen3-4B for Flux.2 Klein, which headroom does not have; the Qwen2.5 / Llama files of other
// models (no q_norm) are not taken.
std::optional<FamilyMatch> qwen3_file_detect(const SafetensorsFile& f) {
  Result<std::string> prefix = llm_encoder_prefix(f);
  if (!prefix.ok() || !f.contains(*prefix + kQwenQKNormKey)) return std::nullopt;
  FamilyMatch m;
  m.text_encoders.push_back({kZImageQwen3, *prefix});
  return m;
}

std::optional<FamilyMatch> zimage_detect(const SafetensorsFile& f) {
  std::optional<std::string> prefix = dit_prefix(f);
  if (!prefix) return qwen3_file_detect(f);
  FamilyMatch m;
  m.diffusion_prefix = *prefix;
  if (f.contains(std::string(kVAEPrefix) + kVAEKey)) m.vae_prefix = kVAEPrefix;
  if (f.contains(std::string(kZImageQwen3Prefix) + kQwenKey))
    m.text_encoders.push_back({kZImageQwen3, kZImageQwen3Prefix});
  return m;
}

std::string zimage_expected_keys() {
  return fmt::format(
      "a Z-Image diffusion model ('{}' and '{}', bare or under '{}'), with a VAE under '{}' and "
      "a Qwen3-4B text encoder under '{}' in a single file; or a Qwen3 text encoder ('{}' and "
      "'{}')",
      kDiTKey, kPadKey, kDiTPrefix, kVAEPrefix, kZImageQwen3Prefix, kQwenKey, kQwenQKNormKey);
}

std::string zimage_unsupported_hint(const SafetensorsFile& f) {
  for (const char* p : {kDiTPrefix, ""})
    if (f.contains(std::string(p) + kDiTKey) && !f.contains(std::string(p) + kPadKey))
      return " (this looks like Lumina Image 2.0's NextDiT, which is not supported)";
  if (f.contains("all_x_embedder.2-1.weight") ||
      f.contains("transformer.all_x_embedder.2-1.weight"))
    return " (this looks like a diffusers-layout Z-Image transformer, which is not supported: use "
           "ComfyUI's layout, e.g. z_image_turbo_bf16.safetensors)";
  return "";
}

// One line for a Qwen3 text encoder read from the header.
std::string qwen3_describe(const SafetensorsFile& file, const std::string& prefix) {
  Result<LLMConfig> c = llm_config_detect(file, prefix);
  if (!c.ok()) return fmt::format("refused: {}", c.status().message());
  return fmt::format(
      "vocab {}, hidden {}, {} layers, {} heads ({} kv) of {}, mlp {}; hidden "
      "state {} unnormed (Z-Image's)",
      c->vocab, c->hidden, c->layers, c->heads, c->kv_heads, c->head_dim, c->intermediate,
      c->output_hidden_state);
}

// What `headroom models` shows beyond the tensors: the model sampling the family implies, the
// DiT's configuration and RoPE axes, the text encoder's configuration.
std::vector<std::pair<std::string, std::string>> zimage_settings_describe(
    const SafetensorsFile& file, const CheckpointInfo& info) {
  std::vector<std::pair<std::string, std::string>> lines;
  if (info.has_diffusion) {
    const ModelSamplingSpec& s = info.family->sampling;
    lines.push_back({"model sampling", fmt::format("flow, shift {}, multiplier {} (ComfyUI's "
                                                   "ZImage)",
                                                   s.shift, s.multiplier)});
    Result<ZImageConfig> c = zimage_config_detect(file, info.diffusion_prefix);
    if (!c.ok()) {
      lines.push_back({"config", fmt::format("refused: {}", c.status().message())});
    } else {
      lines.push_back({"config", c->str()});
      lines.push_back(
          {"RoPE axes", !c->axes_dim.empty()
                            ? fmt::format("[{}] (Z-Image's)", fmt::join(c->axes_dim, ", "))
                            : fmt::format("none: the heads are {} wide and Z-Image's "
                                          "32/48/48 fit 128",
                                          c->head_dim())});
    }
  }
  for (const TextEncoderPart& t : info.text_encoders)
    lines.push_back({t.kind, qwen3_describe(file, t.prefix)});
  return lines;
}

ModelFamily zimage_family_make() {
  ModelFamily f;
  f.name = "zimage";
  f.display_name = "Z-Image";
  f.diffusion_name = "dit";
  f.detect = zimage_detect;
  f.expected_keys = zimage_expected_keys();
  f.unsupported_hint = zimage_unsupported_hint;
  f.settings_describe = zimage_settings_describe;
  // supported_models.py: Lumina2's latent_format is latent_formats.Flux (16 channels, scale
  // 0.3611, shift 0.1159), which ZImage inherits; ZImage's sampling_settings are multiplier 1.0,
  // shift 3.0 on ModelSamplingDiscreteFlow (Lumina2.model_type: ModelType.FLOW), CONST.
  f.latent = latent_format_flux();
  f.inference_dtypes = {DType::BF16, DType::F32};  // Lumina2's, bf16 first
  f.sampling = ModelSamplingSpec{ModelSamplingSpec::Kind::FLOW, Prediction::EPS, 3.0, 1.0};
  f.text_encoder_kinds = {kZImageQwen3};
  f.diffusion_create = zimage_model_create;
  // Z-Image's VAE is Flux.1's ae.safetensors: the SD VAE factory reads it from the tensors.
  f.autoencoder_create = sd_vae_create;
  f.text_encoder_create = zimage_text_encoder_create;
  f.lora_keys = zimage_lora_keys;
  return f;
}

}  // namespace

const std::vector<const ModelFamily*>& zimage_families() {
  static const ModelFamily zimage = zimage_family_make();
  static const std::vector<const ModelFamily*> families = {&zimage};
  return families;
}

}  // namespace hr
