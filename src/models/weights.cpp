// WeightSet: host copies, lazy device upload.
#include "models/weights.h"

namespace hr {

Status WeightSet::load_prefix(const SafetensorsFile& file, std::string_view prefix, DType dtype) {
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    DType target = dtype_is_float(e.dtype) ? dtype : (e.dtype == DType::I32 ? DType::I32 : DType::I64);
    HR_ASSIGN_OR_RETURN(HostTensor t, file.load(e.name, target));
    put(e.name.substr(prefix.size()), std::move(t));
  }
  return Status();
}

void WeightSet::put(const std::string& name, HostTensor t) {
  device_.erase(name);
  host_[name] = std::move(t);
}

const HostTensor* WeightSet::find(std::string_view name) const {
  auto it = host_.find(name);
  return it == host_.end() ? nullptr : &it->second;
}

std::vector<std::string> WeightSet::names() const {
  std::vector<std::string> out;
  out.reserve(host_.size());
  for (const auto& [k, v] : host_) out.push_back(k);
  return out;
}

uint64_t WeightSet::bytes() const {
  uint64_t n = 0;
  for (const auto& [k, v] : host_) n += v.bytes();
  return n;
}

void WeightSet::bind(Backend* backend, Allocator* allocator) {
  if (backend != backend_) device_.clear();
  backend_ = backend;
  allocator_ = allocator;
}

void WeightSet::release_device() { device_.clear(); }

Result<TensorRef> WeightSet::weight_get(const std::string& name, const TensorDesc& desc) {
  auto it = host_.find(name);
  if (it == host_.end())
    return make_error(ErrorCode::NOT_FOUND, "weight '{}' ({}) is not in the checkpoint", name,
                      desc.str());
  HostTensor& h = it->second;
  if (h.desc() != desc)
    return make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is {} but the graph expects {}",
                      name, h.desc().str(), desc.str());
  if (!backend_ || backend_->host_visible()) return h.ref();
  if (!allocator_) return make_error(ErrorCode::INTERNAL, "WeightSet bound without allocator");
  auto dit = device_.find(name);
  if (dit == device_.end()) {
    HR_ASSIGN_OR_RETURN(DeviceBuffer b, allocator_->allocate(h.bytes(), Pool::WEIGHTS, "weight " + name));
    HR_TRY(backend_->copy_h2d(b.data(), h.data(), h.bytes(), nullptr));
    dit = device_.emplace(name, std::move(b)).first;
  }
  return TensorRef{desc, dit->second.data()};
}

}  // namespace hr
