// Single-file checkpoints: what a safetensors file holds (UNet, VAE, text encoders, under the
// LDM/SGM prefixes or none), which family it is (SD1 / SD2 / SDXL) and its prediction type;
// and LoadedModel, a checkpoint's UNet and VAE loaded for computing, with convenience runners.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "memory/weight_set.h"
#include "models/model_config.h"
#include "models/safetensors.h"
#include "models/unet.h"
#include "models/vae.h"

namespace hr {

enum class ModelFamily : uint8_t { UNKNOWN = 0, SD1, SD2, SDXL };
const char* model_family_name(ModelFamily f);  // "unknown", "sd1", "sd2", "sdxl"

// Scale between model-space and VAE-space latents (model = vae * factor): 0.18215 for SD1/SD2,
// 0.13025 for SDXL; 0.18215 for UNKNOWN.
float latent_scale_factor(ModelFamily f);

enum class TextEncoderKind : uint8_t {
  CLIP_L = 0,     // HF CLIPTextModel layout ("text_model.*")
  OPENCLIP_H,     // SD2 OpenCLIP ViT-H text tower ("transformer.resblocks.*", width 1024)
  OPENCLIP_BIGG,  // SDXL OpenCLIP ViT-bigG text tower (width 1280)
};
const char* text_encoder_kind_name(TextEncoderKind k);

struct TextEncoderPart {
  TextEncoderKind kind = TextEncoderKind::CLIP_L;
  // Prefix of the encoder's tensors in the file: for CLIP_L up to and excluding "text_model."
  // ("cond_stage_model.transformer.", "conditioner.embedders.0.transformer.", "" for a bare
  // file); for OpenCLIP up to and excluding "token_embedding.weight" ("cond_stage_model.model.",
  // "conditioner.embedders.1.model.", "").
  std::string prefix;
};

// What a checkpoint file holds (names and shapes only; nothing is loaded).
struct CheckpointInfo {
  std::string path;
  ModelFamily family = ModelFamily::UNKNOWN;
  Prediction prediction = Prediction::EPS;
  // Where `prediction` came from: "override", a ModelSetting source, "key v_pred" (ComfyUI's
  // marker tensor) or "default".
  std::string prediction_source = "default";
  // What the tensors cannot show (Note [model settings order]); the UNet heads and text-encoder
  // heads here are applied by model_load and the loaders.
  ModelSettings settings;
  DType storage_dtype = DType::F32;   // most common float dtype of the tensors
  bool has_unet = false;
  std::string unet_prefix;  // "model.diffusion_model." or "" (UNet-only file)
  bool has_vae = false;
  std::string vae_prefix;  // "first_stage_model." or "" (VAE-only file)
  std::vector<TextEncoderPart> text_encoders;
  std::string str() const;  // one line for logs and `headroom models`
};

// Inspects an open file and reads its settings (a config file beside it, then its metadata).
// `prediction` overrides both (SD2 768-v files usually say nothing: pass Prediction::V or give
// them a .yaml). UNSUPPORTED when no known component is found; the message lists the expected
// keys and a few keys that were found. A bad config file is an error naming it.
Result<CheckpointInfo> checkpoint_inspect(const SafetensorsFile& file,
                                          std::optional<Prediction> prediction = std::nullopt);

struct LoadOptions {
  DType unet_dtype = DType::F32;  // compute dtype; weights are converted on load
  DType vae_dtype = DType::F32;
  std::optional<Prediction> prediction;
  // Override the head layout from the settings or detection (exactly one of the two is used).
  std::optional<int> num_heads;
  std::optional<int> num_head_channels;
  bool load_unet = true;
  bool load_vae = true;
};

// A checkpoint's UNet and VAE ready to run. Not copyable or movable (WeightSet is not); held by
// unique_ptr. The file stays open (mmap) so text encoders can be loaded from it later.
struct LoadedModel {
  CheckpointInfo info;
  std::shared_ptr<const SafetensorsFile> file;
  bool has_unet = false;
  UNetConfig unet;
  DType unet_dtype = DType::F32;
  WeightSet unet_weights;
  bool has_vae = false;
  VAEConfig vae;
  DType vae_dtype = DType::F32;
  WeightSet vae_weights;

  ModelFamily family() const { return info.family; }
  Prediction prediction() const { return info.prediction; }
  float latent_scale() const { return latent_scale_factor(info.family); }
};

// Opens `path`, inspects it and loads the UNet and VAE (those present and requested).
Result<std::unique_ptr<LoadedModel>> model_load(const std::string& path,
                                                const LoadOptions& options = {});
// The same on an already open file.
Result<std::unique_ptr<LoadedModel>> model_load(std::shared_ptr<const SafetensorsFile> file,
                                                const LoadOptions& options = {});

// Runners on a LoadedModel (see unet_run / vae_decode / vae_encode); INVALID_ARGUMENT when the
// model lacks the component.
Result<HostTensor> unet_run(Executor& ex, LoadedModel& model, const HostTensor& x,
                            const HostTensor& timesteps, const HostTensor& context,
                            const HostTensor* y = nullptr);
Result<HostTensor> vae_decode(Executor& ex, LoadedModel& model, const HostTensor& latent);
Result<VAEMoments> vae_encode(Executor& ex, LoadedModel& model, const HostTensor& image);

}  // namespace hr
