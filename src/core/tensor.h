// Tensor descriptors (dtype + shape, always contiguous), non-owning TensorRef views of memory
// on some backend, and HostTensor, an owning, 64-byte aligned host tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace hr {

struct TensorDesc {
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(shape.numel()) * dtype_size(dtype); }
  bool operator==(const TensorDesc& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorDesc& o) const { return !(*this == o); }
  std::string str() const;  // "f16[2, 4, 64, 64]"
};

// A contiguous tensor in memory the caller owns (host or device, by context).
struct TensorRef {
  TensorDesc desc;
  void* data = nullptr;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Owning host tensor. Movable, not copyable (use clone()).
class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(TensorDesc desc);  // zero-filled
  HostTensor(DType dtype, Shape shape) : HostTensor(TensorDesc{dtype, shape}) {}
  // A tensor over memory that `keeper` keeps alive (a checkpoint's mapping, a block of
  // page-locked memory holding several weights): nothing is copied or freed by the tensor, and
  // the memory is read-only unless its maker says otherwise (a mapped checkpoint is).
  static HostTensor view(TensorDesc desc, const void* data, std::shared_ptr<const void> keeper);
  // Note [placeholder tensors]: a tensor with a shape and no data of its own, read-only over
  // zero pages (core/zero_pages.h).
  static HostTensor placeholder(TensorDesc desc);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  HostTensor clone() const;
  // Converted copy (any dtype to a compute dtype).
  HostTensor to(DType dtype) const;
  // Same data, new shape with equal numel (aborts otherwise: a programming error).
  HostTensor reshaped(Shape shape) &&;

  const TensorDesc& desc() const { return desc_; }
  DType dtype() const { return desc_.dtype; }
  const Shape& shape() const { return desc_.shape; }
  int64_t numel() const { return desc_.numel(); }
  size_t bytes() const { return desc_.bytes(); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  float* f32() { return static_cast<float*>(data()); }
  const float* f32() const { return static_cast<const float*>(data()); }
  TensorRef ref() { return TensorRef{desc_, data()}; }
  TensorRef ref() const { return TensorRef{desc_, const_cast<void*>(data())}; }
  bool empty() const { return !data_; }
  bool is_view() const { return keeper_ != nullptr; }
  bool is_placeholder() const { return placeholder_; }

 private:
  struct Free {
    bool borrowed;  // views (no initializer: unique_ptr value-initializes it to false)
    void operator()(void* p) const;
  };
  TensorDesc desc_;
  std::unique_ptr<void, Free> data_;
  std::shared_ptr<const void> keeper_;  // views only
  bool placeholder_ = false;
};

}  // namespace hr
