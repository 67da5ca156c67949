// HostTensor storage.
#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/zero_pages.h"

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

// Note [placeholder tensors]
// A memory plan runs the nodes' own code without computing anything (Note [plan run] in
// workflow/workflow_plan.cpp), and that code asks for weights by name and shape as a real run
// does. A checkpoint opened for planning hands out placeholders instead of its tensors: the
// right descriptor over shared zero pages, so loading reads nothing and a model of any size
// costs address space only. Code that moves weight bytes (rearranged layouts, page-locked
// copies) makes placeholders of placeholders instead of copying zeros around; the bytes it
// would hold are counted all the same, because the accounting reads descriptors.
HostTensor HostTensor::placeholder(TensorDesc desc) {
  std::shared_ptr<const void> zeros = zero_pages(std::max<size_t>(desc.bytes(), 1));
  const void* p = zeros.get();
  HostTensor t = view(desc, p, std::move(zeros));
  t.placeholder_ = true;
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
