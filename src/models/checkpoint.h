// Single-file checkpoints: what a safetensors file holds (which family, where each component's
// tensors are, its prediction type and settings), and LoadedModel, a file's components loaded
// through its family's factories (Note [model families] in models/family.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/autoencoder.h"
#include "models/diffusion_model.h"
#include "models/family.h"
#include "models/model_config.h"
#include "models/safetensors.h"
#include "models/text_encoder.h"

namespace hr {

// What a checkpoint file holds (names and shapes only; nothing is loaded).
struct CheckpointInfo {
  std::string path;
  // The family whose detection accepted the file; its factories load the components. Never
  // null after checkpoint_inspect.
  const ModelFamily* family = nullptr;
  bool family_known = true;  // false: a component alone that does not tell (a bare VAE)
  Prediction prediction = Prediction::EPS;
  // Where `prediction` came from: "override", a ModelSetting source, "key v_pred" (ComfyUI's
  // marker tensor) or "default".
  std::string prediction_source = "default";
  // What the tensors cannot show (Note [model settings order]); the head settings here are
  // applied by the family's factories.
  ModelSettings settings;
  DType storage_dtype = DType::F32;  // most common float dtype of the tensors
  bool has_diffusion = false;
  std::string diffusion_prefix;  // "model.diffusion_model." or "" (a diffusion-model-only file)
  bool has_vae = false;
  std::string vae_prefix;  // "first_stage_model." or "" (VAE-only file)
  std::vector<TextEncoderPart> text_encoders;
  std::string family_name() const;  // the family's name, "unknown" when !family_known
  std::string str() const;          // one line for logs and `headroom models`
};

// Inspects an open file (Note [model families]: the first family whose detection accepts it)
// and reads its settings (a config file beside it, then its metadata). `prediction` overrides
// both (SD2 768-v files usually say nothing: pass Prediction::V or give them a .yaml).
// UNSUPPORTED when no family accepts the file; the message lists the expected keys and a few
// keys that were found. A bad config file is an error naming it.
Result<CheckpointInfo> checkpoint_inspect(const SafetensorsFile& file,
                                          std::optional<Prediction> prediction = std::nullopt);

struct LoadOptions {
  DType diffusion_dtype = DType::F32;  // compute dtypes; weights are converted on load
  // --dtype auto on a backend with bf16: the family's preferred 16-bit dtype replaces an f16
  // diffusion_dtype (Note [family compute dtype] in checkpoint.cpp).
  bool diffusion_dtype_auto = false;
  DType vae_dtype = DType::F32;
  DType text_encoder_dtype = DType::F32;
  // Store the diffusion model / the text encoders in this fp8 dtype at load (UNETLoader's
  // weight_dtype, ComfyUI's --fp8_e4m3fn-unet / --fp8_e4m3fn-text-enc); files already stored in
  // fp8 keep their own format. Note [fp8 at load] in models/weight_format.cpp.
  std::optional<DType> diffusion_weight_dtype;
  std::optional<DType> text_encoder_weight_dtype;
  // UNETLoader's fp8_e4m3fn_fast: the diffusion model's e4m3 linear layers run as fp8 GEMMs
  // where the GPU has fp8 tensor cores (Note [fp8 linear] in graph/pass_fp8.cpp).
  bool diffusion_fp8_fast = false;
  std::optional<Prediction> prediction;
  // Override the head layout from the settings or detection (exactly one of the two is used).
  std::optional<int> num_heads;
  std::optional<int> num_head_channels;
  bool load_diffusion = true;
  bool load_vae = true;
  std::string models_dir;  // where the text encoders' tokenizer files are looked for
};

// A checkpoint's diffusion model and autoencoder ready to run. Not copyable or movable; held by
// unique_ptr. The file stays open (mmap) so text encoders can be loaded from it later.
struct LoadedModel {
  CheckpointInfo info;
  std::shared_ptr<const SafetensorsFile> file;
  std::unique_ptr<DiffusionModel> diffusion;  // null: not in the file or not asked for
  std::unique_ptr<Autoencoder> vae;           // null: not in the file or not asked for

  const ModelFamily& family() const { return *info.family; }
  const LatentFormat& latent_format() const { return info.family->latent; }
};

// Opens `path`, inspects it and loads the diffusion model and VAE (those present and asked for).
Result<std::unique_ptr<LoadedModel>> model_load(const std::string& path,
                                                const LoadOptions& options = {});
// The same on an already open file.
Result<std::unique_ptr<LoadedModel>> model_load(std::shared_ptr<const SafetensorsFile> file,
                                                const LoadOptions& options = {});

// The file's text encoders as its family's text-encoder component; INVALID_ARGUMENT when the
// file holds none.
Result<std::unique_ptr<TextEncoder>> text_encoder_load(std::shared_ptr<const SafetensorsFile> file,
                                                       const CheckpointInfo& info,
                                                       const LoadOptions& options = {});

}  // namespace hr
