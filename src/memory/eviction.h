// The one eviction policy (Note [eviction policy]): which holder gives memory back first, in
// which order an allocation that does not fit frees memory, which device copies of a weight set
// go first, and which go after a run. The allocator (backend/allocator.h) is the mechanism.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/allocator.h"

namespace hr {

// Note [eviction policy]
// Every decision about which memory goes lives here; the allocator only holds blocks, pools, the
// budget and statistics, and calls this policy through ReclaimPolicy (backend/reclaim.h) when an
// allocation does not fit (make_room), when someone asks for room (reclaim: the job runner's
// danger level, OOM recovery), to count what could go (reclaimable_bytes: arena_room, VAE tiling
// and the cond/uncond split plan with it) and after each run (trim_weights: --lowvram/--novram).
// The holders (Reclaimable: weight sets, idle executors' arenas) only free what they are told.
//
// The order, cheapest to lose first:
//   1. for a weight, an idle holder's block of exactly its size (the least recently used holder
//      that has one; within it, its least recently used such copy): a model switch moves the new
//      model's tensors into the old one's blocks (Note [weight block cache]);
//   2. the allocator's cached blocks (all of them when the device refused within the budget,
//      since what is free may be scattered; else the shortfall, largest blocks first);
//   3. idle holders, least recently used holder first, each freeing its least recently used
//      copies first (eviction_order), until the shortfall is freed; a holder in use by a run is
//      never asked, so a run's own weights stay put while it executes;
//   4. what step 3 freed passes through the cache, which gives back the shortfall again.
// The allocation is tried again after each step that freed something.
//
// To change the policy, change this file (and its tests: memory/weight_set_test.cpp,
// memory/eviction_test.cpp): the allocator, the weight store and the executor call it and
// decide nothing themselves. A plan (workflow/workflow_plan.cpp) runs the same allocator with
// the same policy, so plans follow a change without a second model of it. Every allocator that
// holders register with must be given the policy (Allocator's constructor): one without it frees
// only its own cache.
class EvictionPolicy final : public ReclaimPolicy {
 public:
  void make_room(Allocator& a, const ReclaimRequest& request,
                 const std::function<bool()>& retry) override;
  uint64_t reclaim(Allocator& a, uint64_t bytes) override;
  uint64_t reclaimable_bytes(Allocator& a, const Reclaimable* keep,
                             const Reclaimable* also) override;
  uint64_t trim_weights(Allocator& a) override;

 private:
  // Asks idle holders, least recently used first, to free `bytes`; returns the bytes they freed.
  static uint64_t holders_free(Allocator& a, uint64_t bytes);
  // Asks idle holders, least recently used first, for one block of exactly `bytes`.
  static uint64_t holders_block(Allocator& a, uint64_t bytes);
};

// The policy every allocator above backend/ is given (stateless, shared).
std::shared_ptr<ReclaimPolicy> eviction_policy();

// A device copy a holder may free: its key, when it was last used (Allocator::tick) and its
// bytes.
struct EvictionCandidate {
  std::string key;
  uint64_t last_use = 0;
  uint64_t bytes = 0;
};

// The copies to free for `bytes`: least recently used first (ties by key), until their bytes
// reach `bytes`.
std::vector<std::string> eviction_order(std::vector<EvictionCandidate> copies, uint64_t bytes);
// Which of `copies` (all of one block size) gives its block away: the least recently used, the
// first listed among equals; null when there is none.
const EvictionCandidate* eviction_block(const std::vector<EvictionCandidate>& copies);

// Marks a holder in use for a scope (its in-use count), so that the allocator's reclaim, which
// may come while the holder allocates with its lock held, never asks it for room.
class InUseScope {
 public:
  explicit InUseScope(std::atomic<int>& count) : count_(count) { ++count_; }
  ~InUseScope() { --count_; }
  InUseScope(const InUseScope&) = delete;
  InUseScope& operator=(const InUseScope&) = delete;

 private:
  std::atomic<int>& count_;
};

// A holder's device copies by key (a weight set's, a patched view's), each with its last use.
struct DeviceCopy {
  DeviceBuffer buffer;
  uint64_t last_use = 0;
};
using DeviceCopies = std::unordered_map<std::string, DeviceCopy>;
// Frees copies in eviction_order's order until `bytes` are freed; the bytes freed.
uint64_t device_copies_evict(DeviceCopies& copies, uint64_t bytes);
// Frees the copy eviction_block picks among the Pool::WEIGHTS copies of exactly `bytes`; the
// bytes freed (0 when there is none).
uint64_t device_copies_evict_block(DeviceCopies& copies, uint64_t bytes);
uint64_t device_copies_bytes(const DeviceCopies& copies);

}  // namespace hr
