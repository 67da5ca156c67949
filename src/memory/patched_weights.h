// PatchedWeights: a weight store seen through a patch set (LoRA): the same weights, the patched
// ones made on the device from the unpatched originals (Note [patched weights]).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/weight_patch.h"
#include "memory/weight_set.h"

namespace hr {

// Note [patched weights]
// A LoRA never changes the weight store: the host copies stay the checkpoint's (mapped or
// converted), so a model with several LoRA sets costs host memory only for the LoRAs' factors.
// PatchedWeights serves a store's weights with a patch set applied:
//  - a weight without patches is the store's own (its device copy shared with every other view);
//  - a resident patched weight is made once, on the device: the store's copy is uploaded, the
//    patch ops (memory/weight_patch.h) read it and write the patched copy, and the store's copy
//    goes (it is derived data either way). The patched copy is this view's, in Pool::WEIGHTS,
//    and the eviction policy drops it like any weight copy (Note [eviction policy]); the next use
//    makes it again from the unpatched original, without reading the checkpoint;
//  - a streamed patched weight is copied into the ring unpatched and patched there by the same
//    ops on the compute stream, inside the captured step (Note [patched streaming] in
//    graph/executor.h). Its factors stay on the device while the view streams, with one scratch
//    sized for its largest weight; stream_extra_bytes (patch_room_bytes) tells the executor to leave room for them.
// Views are cached per (store, patch set id) by the loader (patched_weights_for), so jobs that
// use the same LoRAs with the same strengths share the patched copies.
class PatchedWeights final : public WeightSource, public Reclaimable {
 public:
  PatchedWeights(std::shared_ptr<WeightSet> base, std::shared_ptr<const PatchSet> patches);
  ~PatchedWeights() override;
  PatchedWeights(const PatchedWeights&) = delete;
  PatchedWeights& operator=(const PatchedWeights&) = delete;

  const PatchSet& patches() const { return *patches_; }
  WeightSet& base() { return *base_; }
  const std::shared_ptr<WeightSet>& base_ptr() const { return base_; }

  void bind(Backend* backend, Allocator* allocator) override;
  Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                               WeightLayout layout) override;
  Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                WeightLayout layout) override;
  Result<std::vector<TensorRef>> weight_host_all(const std::vector<WeightRequest>& requests,
                                                 size_t align) override;
  void weight_evict(const std::string& name, WeightLayout layout) override;
  bool weight_patched(const std::string& name, WeightLayout layout) const override;
  bool patches_any() const override { return !patches_->by_weight.empty(); }
  std::string patch_describe() const override;
  uint64_t patch_device_bytes() const override;
  Status weight_patch_streamed(const WeightRequest& q, void* device, Stream* s) override;
  uint64_t patch_room_bytes(const std::vector<WeightRequest>& streamed,
                            const std::vector<WeightRequest>& resident) const override;
  void patch_signature(std::vector<const void*>& sig) const override;
  uint64_t resident_bytes() const override;
  const Reclaimable* holder() const override { return this; }
  void run_begin() override;
  void run_end() override;

  // Reclaimable: the patched copies and the streaming factors, while no run uses the view.
  uint64_t reclaim(uint64_t bytes) override;
  uint64_t reclaim_block(uint64_t bytes) override;
  uint64_t last_use() const override { return last_use_.load(); }
  bool in_use() const override { return in_use_.load() > 0; }
  uint64_t reclaimable_bytes() const override { return own_bytes(); }
  void allocator_gone() override;
  uint64_t own_bytes() const;  // patched copies, streaming factors and scratch held now
  // Patched copies made so far (a test's and the bench's count of patch work).
  uint64_t patches_made() const { return made_.load(); }
  // Streamed weights patched in the ring so far (issued, counting every run).
  uint64_t streamed_patches() const { return streamed_made_.load(); }

 private:
  // One checkpoint tensor of a served weight: where it lies in the weight and its patches.
  struct Part {
    std::string name;
    size_t byte_offset = 0;
    Shape stored;
    bool ohwi = false;
    const std::vector<WeightPatch>* patches = nullptr;  // null: unpatched
  };
  // Device memory the ops of one part read: factors (uploaded or, on host memory, in place).
  struct PartFactors {
    std::vector<PatchFactorsOnDevice> dev;
    std::vector<DeviceBuffer> buffers;
    std::vector<HostTensor> multipliers;  // DoRA
    // Note [fused low-rank patches]: the fused form's groups, when the part takes it.
    std::vector<FusedLowRank> fused_host;
    std::vector<FusedOnDevice> fused;
  };
  struct StreamExtra {  // what patching one weight needs beside it (patch_room_bytes)
    uint64_t factors = 0;
    int64_t elems = 0;  // scratch, float32 elements
    size_t workspace = 0;
  };
  struct Streamed {  // a streamed weight's prepared parts
    std::vector<Part> parts;
    std::vector<PartFactors> factors;
  };

  Result<std::vector<Part>> parts_of(const std::string& name, const TensorDesc& desc,
                                     WeightLayout layout) const;
  Result<PartFactors> factors_upload(const Part& p, DType dtype, Pool pool);
  // Whether part `p` of a weight of `dtype` takes the fused form here.
  bool fused_here(const Part& p, DType dtype) const;
  // Scratch and workspace part `p` needs (float32 elements, bytes).
  std::pair<int64_t, size_t> part_needs(const Part& p, const PartFactors& f, DType dtype) const;
  // Syncs and frees what resident patching left for its ops to read (pending_).
  void pending_release();
  // Device bytes of the streamed weights' factors, the scratch and the workspace (mu_ held).
  uint64_t streaming_bytes() const;
  Result<HostTensor> multiplier_of(const Part& p, size_t index) const;
  Status scratch_ensure(int64_t elems, size_t workspace);
  Status parts_issue(const std::vector<Part>& parts, const std::vector<PartFactors>& factors,
                     void* dst, const void* src, Stream* s);
  Result<TensorRef> patch_resident(const std::string& name, const TensorDesc& desc,
                                   WeightLayout layout, const std::string& key);
  static bool fp8_host_form(const std::vector<Part>& parts, DType dtype);
  Result<HostTensor> fp8_host_patch(const Part& p) const;
  Result<HostTensor> fp8_host_patch(const std::vector<Part>& parts) const;
  Result<DeviceBuffer> fp8_patched(const std::vector<Part>& parts, const std::string& key);
  Status fp8_stream_prepare(const std::string& key, const std::vector<Part>& parts);
  Status stream_prepare(const WeightRequest& q);
  StreamExtra stream_extra_of(const WeightRequest& q) const;  // mu_ held (Note [stream extra cache])

  std::shared_ptr<WeightSet> base_;
  std::shared_ptr<const PatchSet> patches_;
  Backend* backend_ = nullptr;
  Allocator* allocator_ = nullptr;
  mutable std::mutex mu_;
  DeviceCopies device_;  // patched copies, by weight key
  std::unordered_map<std::string, Streamed> streamed_;  // by weight key
  mutable std::unordered_map<std::string, StreamExtra> extra_;  // by weight key and dtype
  std::map<std::string, HostTensor> fp8_host_;  // streamed fp8 weights patched on the host
  DeviceBuffer scratch_, workspace_;
  // Factors of resident patches the ops issued may still read: freed after a sync at run_end
  // (Note [patched weights]: patching issues without waiting).
  std::vector<PartFactors> pending_;
  uint64_t pending_bytes_ = 0;
  std::atomic<int> in_use_{0};
  std::atomic<uint64_t> last_use_{0};
  std::atomic<uint64_t> made_{0};
  std::atomic<uint64_t> streamed_made_{0};
};

}  // namespace hr
