// Settings the weights cannot show: config files beside checkpoints and headroom's metadata.
#include "models/model_config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>

namespace hr {

// Note [model settings order]
// A checkpoint's tensors give every size of every layer but not how a width splits into heads,
// nor whether the UNet predicts noise or velocity. Like A1111 and Forge, headroom first reads a
// config file beside the checkpoint (<stem>.yaml, the LDM/SGM layout those projects ship), then
// the keys headroom writes into a file's "__metadata__", and only then falls back to detection
// (ComfyUI's "v_pred" marker key; heads from the projection kind, see unet_config_detect and
// clip_text_detect). Each setting keeps its source so `headroom models` can say where it came
// from.

// Note [model config keys]
// Read from the LDM layout (SD1.x/SD2.x configs):
//   model.params.parameterization                      "eps" | "v"
//   model.params.unet_config.params.num_heads          int (-1: unset)
//   model.params.unet_config.params.num_head_channels  int (-1: unset; wins over num_heads)
// and the SGM layout (SDXL configs):
//   model.params.network_config.params.num_heads / num_head_channels
//   model.params.denoiser_config.params.scaling_config.target   "...VScaling" | "...EpsScaling"
// plus headroom's own block (the HF/OpenCLIP configs that hold text-encoder heads are not part of
// these files):
//   headroom.text_encoder_heads                        [int, ...] one per text encoder, file order
//   headroom.parameterization                          "eps" | "v" (overrides model.params)
//   headroom.flux.axes_dim                             [int, int, int] a Flux DiT's RoPE axes

const char* prediction_name(Prediction p) { return p == Prediction::V ? "v" : "eps"; }

std::optional<Prediction> prediction_from_string(std::string v) {
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (v == "v" || v == "v_prediction" || v == "v-prediction" || v == "vpred") return Prediction::V;
  if (v == "eps" || v == "epsilon") return Prediction::EPS;
  return std::nullopt;
}

std::optional<std::string> model_config_path(const std::string& checkpoint_path) {
  namespace fs = std::filesystem;
  fs::path p(checkpoint_path);
  p.replace_extension(".yaml");
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.string();
  return std::nullopt;
}

namespace {

// The node at a dotted path, or an undefined node when any level is missing. (yaml-cpp's
// Node::operator= assigns through to the referenced value, so the walk rebinds with reset().)
YAML::Node yaml_at(const YAML::Node& root, std::initializer_list<const char*> path) {
  YAML::Node n;
  n.reset(root);
  for (const char* key : path) {
    if (!n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& cn = n;
    YAML::Node next = cn[key];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    n.reset(next);
  }
  return n;
}

std::string key_name(std::initializer_list<const char*> path) {
  std::string s;
  for (const char* k : path) {
    if (!s.empty()) s.push_back('.');
    s.append(k);
  }
  return s;
}

Result<std::optional<int>> yaml_int(const YAML::Node& root, const std::string& file,
                                    std::initializer_list<const char*> path) {
  YAML::Node n = yaml_at(root, path);
  if (!n.IsDefined() || n.IsNull()) return std::optional<int>();
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v))
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: '{}' must be an integer", file,
                      key_name(path));
  return std::optional<int>(v);
}

Result<std::optional<Prediction>> yaml_prediction(const YAML::Node& root, const std::string& file,
                                                  std::initializer_list<const char*> path) {
  YAML::Node n = yaml_at(root, path);
  if (!n.IsDefined() || n.IsNull()) return std::optional<Prediction>();
  std::optional<Prediction> p = n.IsScalar() ? prediction_from_string(n.Scalar()) : std::nullopt;
  if (!p)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: '{}' must be \"eps\" or \"v\"", file,
                      key_name(path));
  return p;
}

// UNet heads from one params block: num_head_channels (when not -1) wins, as in the LDM UNet.
Status unet_heads_from(const YAML::Node& root, const std::string& file, const char* config,
                       ModelSettings& s) {
  HR_ASSIGN_OR_RETURN(std::optional<int> heads,
                      yaml_int(root, file, {"model", "params", config, "params", "num_heads"}));
  HR_ASSIGN_OR_RETURN(
      std::optional<int> head_ch,
      yaml_int(root, file, {"model", "params", config, "params", "num_head_channels"}));
  const std::string from = fmt::format("config {} (model.params.{}.params)", file, config);
  if (head_ch && *head_ch > 0) {
    s.unet_num_head_channels.set(*head_ch, from);
  } else if (heads && *heads > 0) {
    s.unet_num_heads.set(*heads, from);
  } else if (heads || head_ch) {
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: model.params.{}.params sets neither num_heads nor num_head_channels to "
                      "a positive value",
                      file, config);
  }
  return Status();
}

// A list of positive integers at a dotted path into `out` (left unset when the key is absent);
// INVALID_ARGUMENT naming the file and the key otherwise.
Status yaml_int_list(const YAML::Node& root, const std::string& file,
                     std::initializer_list<const char*> path, const char* what,
                     ModelSetting<std::vector<int>>& out) {
  YAML::Node n = yaml_at(root, path);
  if (!n.IsDefined() || n.IsNull()) return Status();
  std::vector<int> values;
  bool ok = n.IsSequence();
  for (size_t i = 0; ok && i < n.size(); ++i) {
    int v = 0;
    ok = n[i].IsScalar() && YAML::convert<int>::decode(n[i], v) && v > 0;
    values.push_back(v);
  }
  if (!ok || values.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: '{}' must be a list of positive integers, {}", file, key_name(path),
                      what);
  out.set(values, fmt::format("config {} ({})", file, key_name(path)));
  return Status();
}

Result<std::vector<int>> parse_int_list(const std::string& text, const std::string& where) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = std::string_view(text).substr(pos, comma - pos);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v < 0)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "{}: '{}' is not a comma-separated list of counts (e.g. \"12,20\")",
                        where, text);
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

}  // namespace

Result<ModelSettings> model_config_read(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return make_error(ErrorCode::NOT_FOUND, "cannot open config file '{}'", path);
  } catch (const YAML::Exception& e) {
    return make_error(ErrorCode::CORRUPT, "config file '{}' is not valid YAML: {}", path, e.what());
  }
  ModelSettings s;
  s.config_path = path;
  if (!root.IsMap())
    return make_error(ErrorCode::CORRUPT, "config file '{}' is not a YAML mapping", path);

  HR_ASSIGN_OR_RETURN(std::optional<Prediction> pred,
                      yaml_prediction(root, path, {"headroom", "parameterization"}));
  std::string pred_key = "headroom.parameterization";
  if (!pred) {
    HR_ASSIGN_OR_RETURN(pred, yaml_prediction(root, path, {"model", "params", "parameterization"}));
    pred_key = "model.params.parameterization";
  }
  if (!pred) {
    YAML::Node t = yaml_at(root, {"model", "params", "denoiser_config", "params",
                                  "scaling_config", "target"});
    if (t.IsScalar() && t.Scalar().find("VScaling") != std::string::npos) pred = Prediction::V;
    if (t.IsScalar() && t.Scalar().find("EpsScaling") != std::string::npos) pred = Prediction::EPS;
    pred_key = "model.params.denoiser_config...scaling_config.target";
  }
  if (pred) s.prediction.set(*pred, fmt::format("config {} ({})", path, pred_key));

  HR_TRY(unet_heads_from(root, path, "unet_config", s));
  if (!s.unet_num_heads.value && !s.unet_num_head_channels.value)
    HR_TRY(unet_heads_from(root, path, "network_config", s));

  HR_TRY(yaml_int_list(root, path, {"headroom", "text_encoder_heads"},
                       "one per text encoder (e.g. [12, 20])", s.text_encoder_heads));
  HR_TRY(yaml_int_list(root, path, {"headroom", "flux", "axes_dim"},
                       "the RoPE axes (e.g. [16, 56, 56])", s.flux_axes_dim));
  return s;
}

Result<ModelSettings> model_settings_from_metadata(const std::map<std::string, std::string>& meta) {
  ModelSettings s;
  auto int_key = [&](const char* key, ModelSetting<int>& out) -> Status {
    auto it = meta.find(key);
    if (it == meta.end()) return Status();
    HR_ASSIGN_OR_RETURN(std::vector<int> v, parse_int_list(it->second, key));
    if (v.size() != 1 || v[0] <= 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "metadata '{}' = '{}' is not a positive integer",
                        key, it->second);
    out.set(v[0], fmt::format("metadata {}", key));
    return Status();
  };
  HR_TRY(int_key("headroom.unet.num_heads", s.unet_num_heads));
  if (!s.unet_num_heads.value) HR_TRY(int_key("headroom.unet.num_head_channels", s.unet_num_head_channels));
  if (auto it = meta.find("headroom.clip.heads"); it != meta.end()) {
    HR_ASSIGN_OR_RETURN(std::vector<int> v, parse_int_list(it->second, "headroom.clip.heads"));
    s.text_encoder_heads.set(v, "metadata headroom.clip.heads");
  }
  if (auto it = meta.find("headroom.flux.axes_dim"); it != meta.end()) {
    HR_ASSIGN_OR_RETURN(std::vector<int> v, parse_int_list(it->second, "headroom.flux.axes_dim"));
    s.flux_axes_dim.set(v, "metadata headroom.flux.axes_dim");
  }
  for (const char* key : {"modelspec.prediction_type", "prediction_type"}) {
    auto it = meta.find(key);
    if (it == meta.end() || s.prediction.value) continue;
    if (std::optional<Prediction> p = prediction_from_string(it->second))
      s.prediction.set(*p, fmt::format("metadata {}", key));
  }
  return s;
}

Result<ModelSettings> model_settings_read(const std::string& path,
                                          const std::map<std::string, std::string>& meta) {
  ModelSettings s;
  if (std::optional<std::string> yaml = model_config_path(path)) {
    HR_ASSIGN_OR_RETURN(s, model_config_read(*yaml));
  }
  HR_ASSIGN_OR_RETURN(ModelSettings m, model_settings_from_metadata(meta));
  s.prediction.fill(m.prediction);
  // The UNet's head layout is one setting: take both fields from the same place.
  if (!s.unet_num_heads.value && !s.unet_num_head_channels.value) {
    s.unet_num_heads = m.unet_num_heads;
    s.unet_num_head_channels = m.unet_num_head_channels;
  }
  s.text_encoder_heads.fill(m.text_encoder_heads);
  s.flux_axes_dim.fill(m.flux_axes_dim);
  return s;
}

}  // namespace hr
