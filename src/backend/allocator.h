// The budget-aware device allocator: every device byte goes through it. Keeps per-pool
// statistics {current, peak, allocated, freed, allocations, failures} (allocator-level lens)
// and refuses requests that would exceed the budget with an OUT_OF_MEMORY Status carrying
// the segment breakdown.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/reclaim.h"
#include "core/alignment.h"
#include "core/status.h"

namespace hr {

enum class Pool : uint8_t {
  CONTEXT = 0,  // library workspaces and other fixed overhead
  WEIGHTS,
  ACTIVATIONS,  // planned arenas
  STAGING,      // weight-streaming ring, I/O staging
  OTHER,
  COUNT_,
};
const char* pool_name(Pool p);

struct PoolStats {
  uint64_t current = 0;    // bytes held now
  uint64_t peak = 0;       // max of current since the last reset_peak
  uint64_t allocated = 0;  // bytes ever allocated
  uint64_t freed = 0;      // bytes ever freed
  uint64_t allocations = 0;
  uint64_t failures = 0;  // refused by budget or by the device
  // Note [weight block cache]: bytes of `current` held as idle cached blocks (weights only),
  // and the requests served from them without a device allocation.
  uint64_t cached = 0;
  uint64_t reused = 0;
};

class Allocator;

// Note [peak window]: the largest total held since the previous Allocator::peak_window_take(),
// with each pool's bytes at that moment. It is separate from PoolStats::peak so that one reader
// (the telemetry, memory/telemetry.h) can measure per-node peaks without disturbing anyone who
// uses reset_peak(); a second reader would split the windows between them.
struct PeakWindow {
  uint64_t total = 0;
  std::array<uint64_t, size_t(Pool::COUNT_)> pools{};
};

// A scoped device allocation. Non-copyable; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Pool pool() const { return pool_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  friend class Allocator;
  Allocator* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  Pool pool_ = Pool::OTHER;
  bool owned_ = true;  // false: Allocator::adopt accounting, the memory is someone else's
};

class Allocator {
 public:
  static constexpr uint64_t kUnlimited = UINT64_MAX;

  // `policy` decides what memory goes when an allocation does not fit (Note [eviction policy] in
  // memory/eviction.h); without one only the allocator's own cached blocks go.
  explicit Allocator(Backend& backend, uint64_t budget = kUnlimited,
                     std::shared_ptr<ReclaimPolicy> policy = nullptr);
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;
  ~Allocator();

  // Allocates `bytes` (rounded up to kDeviceAlignment) in `pool`; `what` names the requester
  // in errors ("unet arena", "conv workspace").
  Result<DeviceBuffer> allocate(size_t bytes, Pool pool, const std::string& what);
  // Note [adopted bytes]: counts `bytes` of memory the caller already holds (host memory a
  // host-visible backend computes on directly) against the budget like allocate() would, and
  // gives them back when the buffer is reset; nothing is allocated or freed. `p` is returned by
  // data().
  Result<DeviceBuffer> adopt(void* p, size_t bytes, Pool pool, const std::string& what);

  uint64_t budget() const { return budget_; }
  void set_budget(uint64_t budget);
  PoolStats stats(Pool pool) const;
  PoolStats total() const;  // summed over pools (peak = peak of the sum)
  void reset_peak();
  Backend& backend() { return backend_; }

  // Holders of reclaimable memory (Note [reclaim]). A holder removes itself before it dies.
  void reclaimable_add(Reclaimable* r);
  void reclaimable_remove(Reclaimable* r);
  // Calls `fn` with the registered holders under the lock that keeps them registered (a holder
  // removing itself waits meanwhile); `fn` may ask them to free memory. For the policy.
  void holders_visit(const std::function<void(const std::vector<Reclaimable*>&)>& fn);
  // A monotonically increasing use counter for Reclaimable::last_use.
  uint64_t tick() { return ticks_.fetch_add(1) + 1; }
  // Gives back `bytes` of idle memory to the device, in the policy's order (cached weight
  // blocks, then what holders not in use free, least recently used first); returns bytes freed.
  uint64_t reclaim(uint64_t bytes);
  // What idle holders other than `keep` and `also` could free now, with the cached blocks (they
  // may free less if a run starts meanwhile): room an allocation can count on after reclaim.
  uint64_t reclaimable_bytes(const Reclaimable* keep = nullptr,
                             const Reclaimable* also = nullptr);
  // The most bytes of weights kept resident between uses (--lowvram, --novram); trim_weights()
  // has the policy reclaim weights above it. UINT64_MAX: no cap.
  void set_weights_cap(uint64_t cap) { weights_cap_ = cap; }
  uint64_t weights_cap() const { return weights_cap_; }
  uint64_t trim_weights();
  // Bytes the policy's holders freed, counted in reclaimed().
  void reclaimed_add(uint64_t bytes) { reclaimed_ += bytes; }
  // Bytes an allocation of `rounded` lacks within the budget (rounded when the device refused).
  uint64_t missing_for(size_t rounded) const;
  // Note [weight block cache]: freed weight blocks are kept (counted in the weights pool and the
  // budget, reclaimable) for a later weight of the same size, up to `cap` bytes (1 GiB unless
  // set); 0 disables it (bench_streaming --only switch measures both). cache_release frees cached
  // blocks, largest first, until at least `bytes` are freed (or the cache is empty); returns the
  // bytes freed.
  void set_weight_cache_cap(uint64_t cap);
  uint64_t weight_cache_cap() const { return cache_cap_.load(); }
  uint64_t cache_release(uint64_t bytes);
  // Gives back cached blocks for an allocation of `rounded` bytes that did not fit: every one
  // when the device refused it within the budget (what is free may be scattered), else the
  // shortfall; true when any went.
  bool cache_yield(size_t rounded);
  uint64_t reclaimed() const { return reclaimed_.load(); }  // bytes freed by reclaim, ever

  // Note [pinned budget]: page-locked host memory (streamed weights' host copies, captured
  // steps' input staging) is counted against its own budget (--pinned-budget): pinning too much
  // of a machine's RAM starves everything else. pinned_alloc returns null when the budget or the
  // backend refuses; callers then use pageable memory (slower, synchronous copies).
  void set_pinned_budget(uint64_t bytes) { pinned_->budget = bytes; }
  uint64_t pinned_budget() const { return pinned_->budget.load(); }
  void* pinned_alloc(size_t bytes);
  uint64_t pinned_held() const { return pinned_->held.load(); }
  uint64_t pinned_peak() const { return pinned_->peak.load(); }
  // The account pinned_alloc charges; a holder that may outlive the allocator keeps it to give
  // the bytes back after freeing them with Backend::host_free_pinned.
  struct PinnedAccount {
    std::atomic<uint64_t> budget{UINT64_MAX}, held{0}, peak{0};
    // Page-locked blocks given back so far: a captured copy from a freed block is stale even if
    // a new block lands at the same address (Note [captures and freed memory], capture_cache.cpp).
    std::atomic<uint64_t> frees{0};
  };
  std::shared_ptr<PinnedAccount> pinned_account() const { return pinned_; }
  MemorySegments segments(uint64_t requested) const;
  // Returns the window since the previous call and starts a new one at the current bytes.
  PeakWindow peak_window_take();

 private:
  friend class DeviceBuffer;
  // to_cache: an owned weight block may stay cached (Note [weight block cache]).
  void release(void* p, size_t bytes, Pool pool, bool owned, bool to_cache = true);

  // external: adopt()'s memory (no device call) or null.
  Result<DeviceBuffer> allocate_reclaiming(size_t bytes, Pool pool, const std::string& what,
                                           void* external);
  Result<DeviceBuffer> allocate_once(size_t rounded, Pool pool, const std::string& what,
                                     void* external = nullptr);
  // A cached weight block of exactly `rounded` bytes, or an empty buffer.
  Result<DeviceBuffer> cache_take(size_t rounded, const std::string& what);
  bool fits_budget(size_t rounded) const;

  Backend& backend_;
  uint64_t budget_;
  std::shared_ptr<ReclaimPolicy> policy_;  // Note [eviction policy]
  std::mutex reclaim_mu_;  // guards reclaimables_; never held with mu_
  std::vector<Reclaimable*> reclaimables_;
  std::atomic<uint64_t> ticks_{0};
  std::atomic<uint64_t> reclaimed_{0};
  std::atomic<uint64_t> weights_cap_{UINT64_MAX};
  std::shared_ptr<PinnedAccount> pinned_ = std::make_shared<PinnedAccount>();
  // Note [weight block cache]: size -> (block, syncs_started_ when it was cached); under mu_.
  std::multimap<size_t, std::pair<void*, uint64_t>> cache_;
  std::atomic<uint64_t> cache_cap_{1ull << 30};
  // Device-wide waits begun and ended (the number of the latest ended); under mu_.
  uint64_t syncs_started_ = 0, syncs_done_ = 0;
  mutable std::mutex mu_;
  std::array<PoolStats, size_t(Pool::COUNT_)> pools_{};
  PoolStats total_{};
  PeakWindow window_{};  // Note [peak window]
  void window_mark();    // called with mu_ held whenever total_.current may exceed window_
};

}  // namespace hr
