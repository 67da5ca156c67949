// WeightSet: a model's parameters as host tensors (converted to the compute dtype on load),
// served to the executor by name. On a backend whose memory is not host-visible, tensors are
// uploaded on first use into Pool::WEIGHTS buffers and kept resident (the memory layer's
// weight store will replace this policy with budgeted residency and streaming).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "models/safetensors.h"

namespace hr {

class WeightSet final : public WeightSource {
 public:
  WeightSet() = default;
  WeightSet(const WeightSet&) = delete;
  WeightSet& operator=(const WeightSet&) = delete;

  // Loads every tensor of `file` whose name starts with `prefix`, strips the prefix and
  // converts floats to `dtype` (integer tensors keep their type).
  Status load_prefix(const SafetensorsFile& file, std::string_view prefix, DType dtype);
  void put(const std::string& name, HostTensor t);
  const HostTensor* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  uint64_t bytes() const;
  size_t size() const { return host_.size(); }

  // Where weights are served from. host-visible backends get host pointers directly.
  void bind(Backend* backend, Allocator* allocator);
  // Frees device copies (host copies stay).
  void release_device();

  Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                               WeightLayout layout = WeightLayout::STORED) override;

 private:
  std::map<std::string, HostTensor, std::less<>> host_;
  Backend* backend_ = nullptr;
  Allocator* allocator_ = nullptr;
  std::unordered_map<std::string, DeviceBuffer> device_;  // by name (+ "@layout")
  // Rearranged host copies for host-visible backends (Note [weight layouts]).
  std::unordered_map<std::string, HostTensor> relaid_;
};

}  // namespace hr
