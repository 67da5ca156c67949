// HostTensor storage.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace hr {

std::string TensorDesc::str() const { return std::string(dtype_name(dtype)) + shape.str(); }

void HostTensor::Free::operator()(void* p) const {
  if (!borrowed) std::free(p);
}

HostTensor HostTensor::view(TensorDesc desc, const void* data, std::shared_ptr<const void> keeper) {
  HostTensor t;
  t.desc_ = desc;
  t.data_ = std::unique_ptr<void, Free>(const_cast<void*>(data), Free{true});
  t.keeper_ = keeper ? std::move(keeper) : std::make_shared<int>(0);
  return t;
}

HostTensor::HostTensor(TensorDesc desc) : desc_(desc) {
  size_t n = desc.bytes();
  size_t rounded = (n + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) std::abort();
  std::memset(p, 0, rounded);
  data_.reset(p);
}

HostTensor HostTensor::clone() const {
  HostTensor t(desc_);
  if (!empty()) std::memcpy(t.data(), data(), bytes());
  return t;
}

HostTensor HostTensor::to(DType dtype) const {
  HostTensor t(TensorDesc{dtype, desc_.shape});
  dtype_convert(data(), desc_.dtype, t.data(), dtype, size_t(numel()));
  return t;
}

HostTensor HostTensor::reshaped(Shape shape) && {
  if (shape.numel() != desc_.shape.numel()) std::abort();
  desc_.shape = shape;
  return std::move(*this);
}

}  // namespace hr
