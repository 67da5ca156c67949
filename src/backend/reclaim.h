// What the allocator asks when memory is short: holders of memory they can give back
// (Reclaimable), and the policy that decides who gives back what, and when (ReclaimPolicy; the
// one policy is memory/eviction.h, Note [eviction policy] there). The allocator is the mechanism.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace hr {

class Allocator;
enum class Pool : uint8_t;

// Memory a holder can give back when an allocation does not fit: cached weight copies, an idle
// executor's arena (Note [reclaim] in allocator.cpp).
class Reclaimable {
 public:
  virtual ~Reclaimable() = default;
  // Frees up to about `bytes` (at least that much if it can) of memory nothing is using now;
  // returns the bytes freed. Called without any allocator lock held, possibly from another
  // thread: a holder that is busy may return 0.
  virtual uint64_t reclaim(uint64_t bytes) = 0;
  // When it was last used (an Allocator::tick() value): the least recently used go first.
  virtual uint64_t last_use() const = 0;
  // True while a run uses it: it is not asked.
  virtual bool in_use() const = 0;
  // Bytes reclaim() could free now if asked for everything.
  virtual uint64_t reclaimable_bytes() const = 0;
  // Frees its least recently used idle device block of exactly `bytes` (an allocation's rounded
  // size), if it holds one; returns the bytes freed (0 or `bytes`). Lets a model switch move the
  // new model's weights into the old one's blocks (Note [weight block cache] in allocator.cpp).
  virtual uint64_t reclaim_block(uint64_t bytes) { return 0; }
  // The allocator it is registered with is being destroyed: give back every buffer it holds
  // from it and forget it (a model whose weights outlived their allocator while still bound
  // freed them into a destroyed object). Called without any allocator lock held.
  virtual void allocator_gone() {}
};

// An allocation that the budget or the device refused.
struct ReclaimRequest {
  size_t rounded = 0;  // its size, rounded to kDeviceAlignment
  Pool pool{};
  bool external = false;  // Allocator::adopt's bytes: no cached block can serve it
};

// The decisions the allocator leaves to its owner (Note [eviction policy] in memory/eviction.h):
// which memory goes, in which order, when an allocation does not fit, when asked for room, and
// after a run. It frees through the allocator's mechanism (Allocator::cache_release, the holders
// Allocator::holders_visit lists). An allocator without a policy gives back only its own cached
// blocks (the mechanism's part) and never asks a holder.
class ReclaimPolicy {
 public:
  virtual ~ReclaimPolicy() = default;
  // `request` did not fit: frees memory step by step, calling `retry` after each step that freed
  // some, until `retry` returns true (the allocation no longer fails for room) or nothing more
  // can go.
  virtual void make_room(Allocator& a, const ReclaimRequest& request,
                         const std::function<bool()>& retry) = 0;
  // Allocator::reclaim: gives back about `bytes` of idle memory; returns the bytes freed.
  virtual uint64_t reclaim(Allocator& a, uint64_t bytes) = 0;
  // Allocator::reclaimable_bytes: what reclaim could free now, leaving `keep` and `also` alone.
  virtual uint64_t reclaimable_bytes(Allocator& a, const Reclaimable* keep,
                                     const Reclaimable* also) = 0;
  // Allocator::trim_weights: after a run, weights above the allocator's weights cap go.
  virtual uint64_t trim_weights(Allocator& a) = 0;
};

}  // namespace hr
