// Filling a weight store (memory/weight_set.h) from a checkpoint: the tensors under a name
// prefix, converted to the compute dtype or mapped in place.
#pragma once

#include <memory>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "memory/weight_set.h"
#include "models/safetensors.h"
#include "models/weight_format.h"

namespace hr {

// Loads every tensor of `file` whose name starts with `prefix` into `weights`, strips the prefix
// and converts floats to `dtype` (integer tensors keep their type). With `formats` (read from
// the same file and prefix), fp8 weights stay fp8, scales become float32 {1}, and the
// tensors that only describe the storage are left out (Note [fp8 weights] in graph/graph.h).
Status weights_load_prefix(WeightSet& weights, const SafetensorsFile& file, std::string_view prefix,
                           DType dtype, const WeightFormats* formats = nullptr);
// The same, but tensors already stored in their target dtype are not copied: they are views of
// the file's mapping, which they keep open (Note [mapped weights] in memory/weight_set.cpp).
Status weights_load_prefix(WeightSet& weights, const std::shared_ptr<const SafetensorsFile>& file,
                           std::string_view prefix, DType dtype,
                           const WeightFormats* formats = nullptr);

}  // namespace hr
