// weights_load_prefix: checkpoint tensors into a WeightSet, one at a time.
#include "models/weight_load.h"

#include <optional>
#include <string>

namespace hr {

namespace {

DType load_dtype(const SafetensorsEntry& e, DType dtype) {
  return dtype_is_float(e.dtype) ? dtype : (e.dtype == DType::I32 ? DType::I32 : DType::I64);
}

}  // namespace

Status weights_load_prefix(WeightSet& weights, const SafetensorsFile& file, std::string_view prefix,
                           DType dtype) {
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    HR_ASSIGN_OR_RETURN(HostTensor t, file.load(e.name, load_dtype(e, dtype)));
    file.pages_release(e);  // Note [page release]
    weights.put(e.name.substr(prefix.size()), std::move(t));
  }
  file.pages_release();
  return Status();
}

// Note [mapped weights] in memory/weight_set.cpp.
Status weights_load_prefix(WeightSet& weights, const std::shared_ptr<const SafetensorsFile>& file,
                           std::string_view prefix, DType dtype) {
  for (const SafetensorsEntry& e : file->entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    const DType target = load_dtype(e, dtype);
    std::optional<HostTensor> v = SafetensorsFile::view(file, e, target);
    if (!v) {
      HR_ASSIGN_OR_RETURN(HostTensor t, file->load(e.name, target));
      file->pages_release(e);  // Note [page release]
      v = std::move(t);
    }
    weights.put_mapped(e.name.substr(prefix.size()), std::move(*v));
  }
  return Status();
}

}  // namespace hr
