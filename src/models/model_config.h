// Settings a checkpoint's tensors cannot show (prediction type, UNet and text-encoder head
// counts, a DiT's RoPE axes), each with the place it came from: a config file beside the checkpoint, then the
// file's metadata, then detection (Note [model settings order]).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace hr {

enum class Prediction : uint8_t { EPS = 0, V };
const char* prediction_name(Prediction p);  // "eps", "v"
// "eps"/"epsilon", "v"/"v_prediction"/"v-prediction"/"vpred" (any case); nullopt otherwise.
std::optional<Prediction> prediction_from_string(std::string s);

// One setting and where it came from: "config <path>", "metadata <key>", "key v_pred", or empty
// while nothing set it (the caller then detects it and says so).
template <class T>
struct ModelSetting {
  std::optional<T> value;
  std::string source;
  void set(T v, std::string from) {
    value = std::move(v);
    source = std::move(from);
  }
  // Keeps an earlier (higher-priority) value.
  void fill(const ModelSetting& lower) {
    if (!value) *this = lower;
  }
};

struct ModelSettings {
  ModelSetting<Prediction> prediction;
  // The UNet's heads: a fixed count (SD1: 8) or a fixed width (SD2/SDXL: 64); at most one set.
  ModelSetting<int> unet_num_heads;
  ModelSetting<int> unet_num_head_channels;
  // Heads of each text encoder, in the order the file holds them (0: not given).
  ModelSetting<std::vector<int>> text_encoder_heads;
  // A Flux DiT's RoPE axes (index, row, column), summing to its head width; the family's own
  // (16/56/56) when not given (Note [flux rope axes] in models/flux/flux_model.cpp).
  ModelSetting<std::vector<int>> flux_axes_dim;
  std::string config_path;  // the config file that was read, or empty

  int text_encoder_heads_at(size_t i) const {
    return text_encoder_heads.value && i < text_encoder_heads.value->size()
               ? (*text_encoder_heads.value)[i]
               : 0;
  }
};

// The config file of a checkpoint: "<dir>/<stem>.yaml" beside it (as A1111 and Forge look for
// it), or nullopt when there is none.
std::optional<std::string> model_config_path(const std::string& checkpoint_path);

// Reads an LDM/SGM config file (Note [model config keys]). CORRUPT naming the file when it is
// not YAML; INVALID_ARGUMENT naming the key when a value has the wrong type or range.
Result<ModelSettings> model_config_read(const std::string& yaml_path);

// Reads headroom's keys from a safetensors "__metadata__" map (written by make-model):
// "headroom.unet.num_heads", "headroom.unet.num_head_channels", "headroom.clip.heads"
// (comma-separated, one per text encoder), "headroom.flux.axes_dim" (comma-separated, e.g.
// "16,56,56"), and "modelspec.prediction_type" / "prediction_type". INVALID_ARGUMENT naming the
// key when a value does not parse.
Result<ModelSettings> model_settings_from_metadata(const std::map<std::string, std::string>& meta);

// The settings of the checkpoint at `path` with this metadata, config file first, then metadata
// (every field filled from the highest-priority place that sets it).
Result<ModelSettings> model_settings_read(const std::string& path,
                                          const std::map<std::string, std::string>& meta);

}  // namespace hr
