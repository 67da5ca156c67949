// weights_load_prefix: checkpoint tensors into a WeightSet, one at a time.
#include "models/weight_load.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/fp8_round.h"

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
    if (formats->scales.count(local)) return DType::F32;  // as ComfyUI keeps them
    if (formats->storage)
      if (auto it = formats->storage->find(local); it != formats->storage->end())
        return it->second.dtype;
  }
  return load_dtype(e, dtype);
}

// n values of `src` (dtype `from`: F16 or BF16 by the cast table, else F32) rounded to fp8 as
// torch casts, in chunks over the OpenMP threads (Note [fp8 cast table] in core/fp8_round.cpp).
void cast_to_fp8(const void* src, DType from, DType fp8, uint8_t* dst, int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  const bool half = from == DType::F16 || from == DType::BF16;
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
    if (half)
      half_to_f8(static_cast<const uint16_t*>(src) + i, from, fp8, dst + i, len);
    else
      f32_to_f8(static_cast<const float*>(src) + i, fp8, dst + i, len);
  }
}

// A tensor in `target`: the file's bytes, converted, or (fp8 at load, Note [fp8 at load] in
// weight_format.cpp) rounded to fp8 from its 16-bit or float32 values as torch casts.
Result<HostTensor> tensor_load(const SafetensorsFile& file, const SafetensorsEntry& e,
                               DType target) {
  if (!dtype_is_fp8(target) || e.dtype == target) return file.load(e.name, target);
  const bool half = e.dtype == DType::F16 || e.dtype == DType::BF16;
  HR_ASSIGN_OR_RETURN(HostTensor f, file.load(e.name, half ? e.dtype : DType::F32));
  HostTensor q(target, e.shape);
  if (f.is_placeholder()) return HostTensor::placeholder(q.desc());
  cast_to_fp8(f.data(), f.desc().dtype, target, static_cast<uint8_t*>(q.data()), f.numel());
  return q;
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
    HR_ASSIGN_OR_RETURN(HostTensor t, tensor_load(file, e, *target));
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
      HR_ASSIGN_OR_RETURN(HostTensor t, tensor_load(*file, e, *target));
      file->pages_release(e);  // Note [page release]
      v = std::move(t);
    }
    weights.put_mapped(local, shaped(std::move(*v), local, formats));
  }
  return Status();
}

}  // namespace hr
