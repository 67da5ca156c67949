// The model-family registry: each family declares, as data, how it is detected from a file's
// key names and shapes, its latent format, its model sampling, its text-encoder kinds, the
// factories of its components and its LoRA key map (Note [model families]).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/lora_keys.h"
#include "models/model_config.h"
#include "models/safetensors.h"

namespace hr {

class Autoencoder;
class DiffusionModel;
class TextEncoder;
struct CheckpointInfo;
struct LoadOptions;

// Note [model families]
// A family (ComfyUI's comfy/supported_models.py entry plus its model_detection.py rule) is one
// ModelFamily value in the registry. Detection asks each family in registry order whether a
// file's keys and shapes are its own (`detect`, which also returns where each component's
// tensors are); the first that answers wins. Everything after detection reads the family's data
// or calls its components through their interfaces (DiffusionModel, TextEncoder, Autoencoder):
// the sampler takes the latent format and model sampling from here, the nodes never test a
// family by name, and the planner runs the same component code (Note [plan run]).
//
// Adding a family: a folder src/models/<family>/ with its networks, a detection function and
// the component classes, and one line in model_families_builtin() (family.cpp) that appends its
// ModelFamily values. A family detected from keys that other families also hold goes before
// them. Tests register folder-less families with model_family_register (family_test.cpp).

// Where a latent's channels live and how they look (comfy/latent_formats.py).
struct LatentFormat {
  int channels = 4;
  // model-space latent = (VAE-space latent - shift_factor) * scale_factor (SD1/SD2 0.18215,
  // SDXL 0.13025; Flux 0.3611). Note [latent format shift].
  float scale_factor = 1.0f;
  // latent2rgb: each channel's contribution to R, G, B (one row per channel) and a bias,
  // for previews without the VAE (Note [latent2rgb factors] in sampling/latent_preview.cpp).
  std::vector<std::array<float, 3>> rgb_factors;
  std::array<float, 3> rgb_bias{0.f, 0.f, 0.f};
  float shift_factor = 0.0f;  // SD 0, Flux 0.1159 (last, so that SD's formats need not name it)

  // ComfyUI's process_in / process_out, in place on float32 values (Note [latent format shift]).
  void process_in(float* x, int64_t n) const;
  void process_out(float* x, int64_t n) const;
};

// What sampling/ builds its ModelSampling from (ComfyUI's model_base.ModelType): DISCRETE is
// ModelSamplingDiscrete (eps or v over the scaled-linear beta schedule), FLOW
// ModelSamplingDiscreteFlow (SD3, Z-Image, Flux schnell: shift 1, multiplier 1) and FLUX
// ModelSamplingFlux (Flux dev: shift 1.15, or the ModelSamplingFlux node's resolution-dependent
// shift); FLOW and FLUX predict CONST.
struct ModelSamplingSpec {
  enum class Kind : uint8_t { DISCRETE = 0, FLOW, FLUX };
  Kind kind = Kind::DISCRETE;
  Prediction prediction = Prediction::EPS;  // DISCRETE
  double shift = 1.0;                       // FLOW and FLUX
  double multiplier = 1000.0;               // FLOW: timestep = sigma * multiplier
};
const char* model_sampling_kind_name(ModelSamplingSpec::Kind k);  // "discrete", "flow", "flux"

// One text encoder found in a file: its kind (a family's name for it, e.g. "clip_l") and the
// prefix of its tensors.
struct TextEncoderPart {
  std::string kind;
  std::string prefix;
};

// What a family's detection found: the components and the prefixes of their tensors.
struct FamilyMatch {
  std::optional<std::string> diffusion_prefix;
  std::optional<std::string> vae_prefix;
  std::vector<TextEncoderPart> text_encoders;
  // False when the file holds only components that do not tell the family (a bare VAE):
  // the family's factories load them, and the file reports family "unknown".
  bool family_known = true;
};

// What a component factory is given.
struct ComponentLoad {
  std::shared_ptr<const SafetensorsFile> file;
  const CheckpointInfo& info;
  const LoadOptions& options;
};

struct ModelFamily {
  std::string name;                    // "sd1", "sdxl": logs, `headroom models`, tests
  std::string display_name;            // "Stable Diffusion": the unsupported-file message
  std::string diffusion_name = "unet";  // how `headroom models` names the diffusion component
  // Keys and shapes -> the components, or nullopt when the file is not this family's.
  std::function<std::optional<FamilyMatch>(const SafetensorsFile&)> detect;
  // The keys this family looks for, for the unsupported-file message, and a hint for a file
  // that looks like the family in another layout ("" when none).
  std::string expected_keys;
  std::function<std::string(const SafetensorsFile&)> unsupported_hint;

  // What the tensors cannot show, one (label, "value (source)") line per setting, for
  // `headroom models` (Note [model settings order]); null: nothing beyond the prediction.
  std::function<std::vector<std::pair<std::string, std::string>>(const SafetensorsFile&,
                                                                 const CheckpointInfo&)>
      settings_describe;

  LatentFormat latent;
  // ComfyUI's supported_inference_dtypes in its order of preference, for `--dtype auto` on a GPU
  // (Note [family compute dtype] in checkpoint.cpp); empty: the run's compute dtype.
  std::vector<DType> inference_dtypes;
  ModelSamplingSpec sampling;  // the default; a file's settings may name another prediction
  std::vector<std::string> text_encoder_kinds;

  std::function<Result<std::unique_ptr<DiffusionModel>>(const ComponentLoad&)> diffusion_create;
  std::function<Result<std::unique_ptr<Autoencoder>>(const ComponentLoad&)> autoencoder_create;
  // All of the file's text encoders (info.text_encoders) as one component, with its tokenizer.
  std::function<Result<std::unique_ptr<TextEncoder>>(const ComponentLoad&)> text_encoder_create;

  // The LoRA key map of this family's loaded components (Note [lora key maps]); nullptr: the
  // family has no LoRA support, and a LoRA loader refuses its models by the family's name.
  LoraKeysFn lora_keys = nullptr;
};

// Every family in detection order: the built-in ones, then those registered at run time.
std::vector<const ModelFamily*> model_families();
const ModelFamily* model_family_find(std::string_view name);  // null when unknown
// Appends a family after the others (tests; a plugin later). Its name must be new.
Status model_family_register(ModelFamily family);
// Removes a family registered at run time (tests).
void model_family_unregister(std::string_view name);

struct FamilyDetected {
  const ModelFamily* family = nullptr;
  FamilyMatch match;
};
// The first family whose detection accepts the file; UNSUPPORTED, listing every family's
// expected keys and a few keys that were found, when none does.
Result<FamilyDetected> model_family_detect(const SafetensorsFile& file);

}  // namespace hr
