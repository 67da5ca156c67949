// weights_load_prefix: checkpoint tensors into a WeightSet, one at a time.
#include "models/weight_load.h"

#include <optional>
#include <string>

namespace hr {

namespace {

DType load_dtype(const SafetensorsEntry& e, DType dtype) {
  return dtype_is_float(e.dtype) ? dtype : (e.dtype == DType::I32 ? DType::I32 : DType::I64);
}

// What one tensor becomes in the store: skipped (nullopt), or its dtype there.
std::optional<DType> stored_dtype(const SafetensorsEntry& e, const std::string& local, DType dtype,
                                  const WeightFormats* formats) {
  if (formats) {
    if (formats->not_weights.count(local)) return std::nullopt;
    if (formats->storage)
      if (auto it = formats->storage->find(local); it != formats->storage->end())
        return it->second.dtype;
  }
  return load_dtype(e, dtype);
}

// Scales are one number; the graph reads them as {1} (Note [fp8 weights]).
HostTensor shaped(HostTensor t, const std::string& local, const WeightFormats* formats) {
  if (!formats || !formats->scales.count(local) || t.desc().shape == Shape{1}) return t;
  return std::move(t).reshaped(Shape{1});
}

}  // namespace

Status weights_load_prefix(WeightSet& weights, const SafetensorsFile& file, std::string_view prefix,
                           DType dtype, const WeightFormats* formats) {
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string local = e.name.substr(prefix.size());
    const std::optional<DType> target = stored_dtype(e, local, dtype, formats);
    if (!target) continue;
    HR_ASSIGN_OR_RETURN(HostTensor t, file.load(e.name, *target));
    file.pages_release(e);  // Note [page release]
    weights.put(local, shaped(std::move(t), local, formats));
  }
  file.pages_release();
  return Status();
}

// Note [mapped weights] in memory/weight_set.cpp.
Status weights_load_prefix(WeightSet& weights, const std::shared_ptr<const SafetensorsFile>& file,
                           std::string_view prefix, DType dtype, const WeightFormats* formats) {
  for (const SafetensorsEntry& e : file->entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string local = e.name.substr(prefix.size());
    const std::optional<DType> target = stored_dtype(e, local, dtype, formats);
    if (!target) continue;
    std::optional<HostTensor> v = SafetensorsFile::view(file, e, *target);
    if (!v) {
      HR_ASSIGN_OR_RETURN(HostTensor t, file->load(e.name, *target));
      file->pages_release(e);  // Note [page release]
      v = std::move(t);
    }
    weights.put_mapped(local, shaped(std::move(*v), local, formats));
  }
  return Status();
}

}  // namespace hr
