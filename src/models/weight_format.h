// How a checkpoint stores its weights: plain floats, fp8, ComfyUI's scaled fp8 (`scaled_fp8`
// marker, per-layer `scale_weight` / `scale_input`) or per-layer `comfy_quant` JSON with
// `weight_scale`; read once per component, refused by name where headroom cannot compute it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/status.h"
#include "graph/graph.h"
#include "models/safetensors.h"

namespace hr {

struct WeightFormats {
  // fp8 weights (names without the prefix) and their scales (Note [fp8 weights] in graph.h).
  std::shared_ptr<const WeightStorageMap> storage;
  // Tensors that describe the storage and are not weights (markers, comfy_quant, scale_input).
  std::unordered_set<std::string> not_weights;
  // Scales, stored as float32 {1}.
  std::unordered_set<std::string> scales;
  std::string kind;  // "", "fp8", "scaled fp8 (f8_e4m3)", "comfy_quant (float8_e4m3fn)"
  // Layers (names without the prefix and without ".weight") that have an input scale.
  std::unordered_set<std::string> input_scaled;
  bool any() const { return storage && !storage->empty(); }
};

// `formats` with its e4m3 weights marked fast (UNETLoader's fp8_e4m3fn_fast, Note [fp8 linear]
// in graph/pass_fp8.cpp), except those of layers with an input scale, which dequantize.
WeightFormats weight_formats_fast(WeightFormats formats);

// The formats of a component stored in fp8 at load (Note [fp8 at load] in weight_format.cpp):
// every float tensor of rank >= 1 under `prefix`, `fp8` being F8_E4M3 or F8_E5M2.
WeightFormats weight_formats_at_load(const SafetensorsFile& file, std::string_view prefix,
                                     DType fp8);
// The store's formats: the file's own when it has any, else fp8 at load when `at_load` is set.
Result<WeightFormats> weight_formats_for(const SafetensorsFile& file, std::string_view prefix,
                                         std::optional<DType> at_load);

// The formats of the tensors of `file` under `prefix` (names in the result without it).
// Refuses, naming the file, the key and the format: a comfy_quant format other than per-tensor
// float8_e4m3fn / float8_e5m2, a scale that is not one number, a scale beside a weight that is
// not fp8, a comfy_quant entry that is not JSON.
Result<WeightFormats> weight_formats_read(const SafetensorsFile& file, std::string_view prefix);

}  // namespace hr
