// WeightSet, the weight store: a model's parameters as host tensors (converted to the compute
// dtype on load, or views of a checkpoint's mapping: Note [mapped weights]; models/weight_load.h
// fills it), served to the executor by name. On a backend whose memory is not host-visible,
// tensors are uploaded on first use into Pool::WEIGHTS buffers and stay resident until the
// allocator needs the room: a set no run is using gives copies back, and after each run copies
// above the allocator's weights cap go (--lowvram, --novram); the eviction policy decides which
// (Note [eviction policy] in memory/eviction.h). On the CPU the host copies are used in place
// and their bytes are counted the same way (Note [adopted bytes]). Weights the executor streams
// are served from host memory (page-locked copies on the GPU, made once, laid out in streaming
// order: Note [pinned copies]) and have no device copy.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/allocator.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "memory/eviction.h"

namespace hr {

class WeightSet final : public WeightSource, public Reclaimable {
 public:
  WeightSet() = default;
  ~WeightSet() override;
  WeightSet(const WeightSet&) = delete;
  WeightSet& operator=(const WeightSet&) = delete;

  // Stores `t` as `name`, replacing what was there (and every copy made from it).
  void put(const std::string& name, HostTensor t);
  // The same for a view of a read-only file mapping that `t` keeps alive (HostTensor::view): its
  // pages are given back each time the weight has been copied (Note [mapped weights]).
  void put_mapped(const std::string& name, HostTensor t);
  const HostTensor* find(std::string_view name) const;
  // How the stored tensors are read (Note [fp8 weights] in graph/graph.h); null: as they are.
  void set_storage(std::shared_ptr<const WeightStorageMap> storage) { storage_ = std::move(storage); }
  const WeightStorage* storage_of(const std::string& name) const {
    if (!storage_) return nullptr;
    auto it = storage_->find(name);
    return it == storage_->end() ? nullptr : &it->second;
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  uint64_t bytes() const;
  size_t size() const { return host_.size(); }

  // Where weights are served from. host-visible backends get host pointers directly.
  void bind(Backend* backend, Allocator* allocator) override;
  // Frees device copies (host copies stay).
  void release_device();

  Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                               WeightLayout layout = WeightLayout::STORED) override;
  Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                WeightLayout layout) override;
  Result<std::vector<TensorRef>> weight_host_all(const std::vector<WeightRequest>& requests,
                                                 size_t align) override;
  void weight_evict(const std::string& name, WeightLayout layout) override;
  uint64_t resident_bytes() const override { return device_bytes(); }
  const Reclaimable* holder() const override { return this; }
  void run_begin() override;
  void run_end() override;
  uint64_t pinned_bytes() const;  // page-locked host copies made for streaming
  // Bytes of host tensors that are views of a checkpoint's mapping (Note [mapped weights]).
  uint64_t mapped_bytes() const;

  // Reclaimable: frees device copies while no run uses the set, in the order eviction_order and
  // eviction_block choose (Note [eviction policy]).
  uint64_t reclaim(uint64_t bytes) override;
  uint64_t reclaim_block(uint64_t bytes) override;
  uint64_t last_use() const override { return last_use_.load(); }
  bool in_use() const override { return in_use_.load() > 0; }
  uint64_t reclaimable_bytes() const override { return device_bytes(); }
  uint64_t device_bytes() const;  // bytes of device copies held now
  void allocator_gone() override;

 private:
  std::map<std::string, HostTensor, std::less<>> host_;
  std::shared_ptr<const WeightStorageMap> storage_;
  Backend* backend_ = nullptr;
  Allocator* allocator_ = nullptr;
  mutable std::mutex mu_;  // guards device_ (reclaim may come from another thread)
  DeviceCopies device_;  // by name (+ "@layout")
  std::atomic<int> in_use_{0};
  std::atomic<uint64_t> last_use_{0};
  // Rearranged host copies for host-visible backends (Note [weight layouts]).
  std::unordered_map<std::string, HostTensor> relaid_;
  // Names whose host tensor is a view of a checkpoint's mapping (Note [mapped weights]).
  std::unordered_set<std::string> mapped_;
  // Page-locked copies of streamed weights, by key (Note [pinned copies], Note [pinned budget]):
  // each lives in a block that several weights share, freed with its last weight.
  struct PinnedBlock;
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<PinnedBlock> block;
  };
  std::unordered_map<std::string, Pinned> pinned_;
  // Whose budget pinned_ counts against, and the backend that allocated it; both
  // outlive the allocator if need be (the account is shared).
  std::shared_ptr<Allocator::PinnedAccount> pinned_account_;
  Backend* pinned_backend_ = nullptr;
  void pinned_clear() { pinned_.clear(); }
  // Page-locked copies of the weights `requests` name (checked already) in one block, each at an
  // offset rounded to `align`; false when the pinned budget or the backend refuses. Called with
  // mu_ held.
  bool pinned_make(const std::vector<const WeightRequest*>& requests, size_t align);
  // After `t` (the host source of `name`) was copied elsewhere: gives back the pages of a
  // mapped source, and the rearranged copy `key` if it is one. Called with mu_ held.
  void host_source_done(const std::string& name, const std::string& key);
  // Checks `name` against `desc` in `layout` and returns its device-copy key.
  Result<std::string> host_check(const std::string& name, const TensorDesc& desc,
                                 WeightLayout layout) const;
  // host_check for WeightLayout::STACK: every part present, and together they stack into desc.
  Result<std::string> stack_check(const std::string& name, const TensorDesc& desc) const;
  // The host tensor for `name` in `layout` (the stored one, or its rearranged copy, made once),
  // after checking it against `desc`; `key` gets the device-copy key. Called with mu_ held.
  Result<const HostTensor*> host_source(const std::string& name, const TensorDesc& desc,
                                        WeightLayout layout, std::string* key);
};

}  // namespace hr
