// weight_formats_read: fp8, scaled fp8 and comfy_quant layers of a checkpoint.
#include "models/weight_format.h"

#include <fmt/format.h>

#include "core/json_parse.h"

namespace hr {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The layer of a per-layer tensor "<layer>.<what>" ("" when the name does not end so).
std::string layer_of(std::string_view name, std::string_view what) {
  const size_t cut = what.size() + 1;  // ".<what>"
  if (name.size() <= cut || name[name.size() - cut] != '.' || !ends_with(name, what)) return "";
  return std::string(name.substr(0, name.size() - cut));
}

Status refuse(const SafetensorsFile& f, std::string_view key, const std::string& why) {
  return make_error(ErrorCode::UNSUPPORTED, "{}: tensor '{}': {}", f.path(), key, why);
}

// A per-tensor scale: one number.
Status scale_check(const SafetensorsFile& f, const SafetensorsEntry& e) {
  if (e.shape.numel() != 1 || !dtype_is_float(e.dtype))
    return refuse(f, e.name, fmt::format("a scale must be one float, found {} {}",
                                         dtype_name(e.dtype), e.shape.str()));
  return Status();
}

// comfy_quant: a U8 tensor holding JSON, {"format": "float8_e4m3fn", ...}: a few dozen bytes in
// ComfyUI's files, so anything past kComfyQuantMost is refused unread.
constexpr size_t kComfyQuantMost = 64 << 10;

Result<std::string> comfy_quant_format(const SafetensorsFile& f, const SafetensorsEntry& e) {
  std::span<const std::byte> raw = f.raw(e);
  if (raw.size() > kComfyQuantMost)
    return refuse(f, e.name, fmt::format("comfy_quant holds {} bytes; a layer's format is a short "
                                         "JSON object", raw.size()));
  Result<nlohmann::json> j =
      json_parse(std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
  if (!j.ok() || !j->is_object() || !j->contains("format") || !(*j)["format"].is_string())
    return refuse(f, e.name, "comfy_quant is not JSON with a \"format\" string");
  return (*j)["format"].get<std::string>();
}

struct Reader {
  const SafetensorsFile& file;
  std::string_view prefix;
  WeightFormats out;
  WeightStorageMap map;

  std::string local(const std::string& name) const { return name.substr(prefix.size()); }

  // A weight `<layer>.weight` in fp8 with the scale `scale_key` (full name; "" = none).
  Status weight_scaled(const std::string& layer, const std::string& scale_key) {
    const std::string w = layer + ".weight";
    const SafetensorsEntry* e = file.find(w);
    if (!e) return refuse(file, scale_key, "a scale without its weight '" + w + "'");
    if (!dtype_is_fp8(e->dtype))
      return refuse(file, scale_key, fmt::format("a scale beside a {} weight (scales are for fp8)",
                                                 dtype_name(e->dtype)));
    map[local(w)] = WeightStorage{e->dtype, scale_key.empty() ? "" : local(scale_key)};
    if (!scale_key.empty()) out.scales.insert(local(scale_key));
    return Status();
  }

  Status comfy_quant(const SafetensorsEntry& e) {
    HR_ASSIGN_OR_RETURN(std::string format, comfy_quant_format(file, e));
    const std::string layer = layer_of(e.name, "comfy_quant");
    if (format != "float8_e4m3fn" && format != "float8_e5m2")
      return refuse(file, e.name,
                    fmt::format("comfy_quant format '{}' is not supported (headroom computes the "
                                "per-tensor float8_e4m3fn and float8_e5m2 formats)", format));
    out.not_weights.insert(local(e.name));
    const std::string scale = layer + ".weight_scale";
    const SafetensorsEntry* s = file.find(scale);
    if (s) HR_TRY(scale_check(file, *s));
    if (out.kind.empty()) out.kind = "comfy_quant (" + format + ")";
    return weight_scaled(layer, s ? scale : "");
  }

  Status entry(const SafetensorsEntry& e) {
    const std::string_view n = e.name;
    if (n.size() == prefix.size() + 10 && ends_with(n, "scaled_fp8")) {
      out.not_weights.insert(local(e.name));
      out.kind = fmt::format("scaled fp8 ({})", dtype_name(dtype_is_fp8(e.dtype) ? e.dtype : DType::F8_E4M3));
      return Status();
    }
    if (ends_with(n, ".comfy_quant")) return comfy_quant(e);
    if (ends_with(n, ".scale_weight")) {
      HR_TRY(scale_check(file, e));
      return weight_scaled(layer_of(n, "scale_weight"), e.name);
    }
    if (ends_with(n, ".scale_input") || ends_with(n, ".input_scale")) {  // Note [input scales]
      HR_TRY(scale_check(file, e));
      out.not_weights.insert(local(e.name));
      out.input_scaled.insert(local(layer_of(n, ends_with(n, ".scale_input") ? "scale_input"
                                                                              : "input_scale")));
      return Status();
    }
    if (dtype_is_fp8(e.dtype) && !map.count(local(e.name))) map[local(e.name)] = WeightStorage{e.dtype, ""};
    return Status();
  }
};

}  // namespace

// Note [input scales]: ComfyUI reads scale_input only when it multiplies in fp8 (the `_fast`
// modes); dequantizing it is unused, so it is kept out of the weights, and its layer dequantizes
// in the `_fast` modes too (weight_formats_fast).
Result<WeightFormats> weight_formats_read(const SafetensorsFile& file, std::string_view prefix) {
  Reader r{file, prefix, {}, {}};
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    HR_TRY(r.entry(e));
  }
  // A weight_scale whose layer has no comfy_quant entry: a format headroom does not know.
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0 && ends_with(e.name, ".weight_scale") &&
        !r.out.scales.count(r.local(e.name)))
      return refuse(file, e.name, "weight_scale without a comfy_quant entry for its layer");
  if (!r.map.empty() && r.out.kind.empty())
    r.out.kind = fmt::format("fp8 ({})", dtype_name(r.map.begin()->second.dtype));
  r.out.storage = std::make_shared<const WeightStorageMap>(std::move(r.map));
  return std::move(r.out);
}

// Note [fp8 at load]
// ComfyUI's UNETLoader weight_dtype fp8_* (and --fp8_e4m3fn-unet / -text-enc) builds the model
// with every layer's parameters in the fp8 dtype (openaimodel.py passes dtype to every Conv2d,
// Linear, GroupNorm and LayerNorm; CLIP's embeddings too) and load_state_dict copies the file's
// values into them: torch's round-to-nearest-even cast, no scale. Each layer casts its weight
// and bias to the compute dtype before use (manual_cast). So here: every float tensor of rank
// >= 1 is stored in fp8 by the same cast (core/fp8_round.h) and the graph CASTs it back.
WeightFormats weight_formats_at_load(const SafetensorsFile& file, std::string_view prefix,
                                     DType fp8) {
  WeightStorageMap map;
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0 && dtype_is_float(e.dtype) &&
        e.shape.rank >= 1)
      map[e.name.substr(prefix.size())] = WeightStorage{fp8, ""};
  WeightFormats out;
  out.kind = fmt::format("{} at load", dtype_name(fp8));
  out.storage = std::make_shared<const WeightStorageMap>(std::move(map));
  return out;
}

WeightFormats weight_formats_fast(WeightFormats formats) {
  if (!formats.any()) return formats;
  WeightStorageMap map = *formats.storage;
  for (auto& [name, st] : map) {
    const std::string layer = layer_of(name, "weight");  // "" when not a layer's weight
    st.fast = st.dtype == DType::F8_E4M3 && !layer.empty() && !formats.input_scaled.count(layer);
  }
  formats.storage = std::make_shared<const WeightStorageMap>(std::move(map));
  return formats;
}

Result<WeightFormats> weight_formats_for(const SafetensorsFile& file, std::string_view prefix,
                                         std::optional<DType> at_load) {
  HR_ASSIGN_OR_RETURN(WeightFormats own, weight_formats_read(file, prefix));
  if (own.any() || !at_load) return own;
  return weight_formats_at_load(file, prefix, *at_load);
}

}  // namespace hr
