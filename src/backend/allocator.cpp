// Budget-aware allocator over Backend::device_alloc.
#include "backend/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utility>

namespace hr {

const char* pool_name(Pool p) {
  switch (p) {
    case Pool::CONTEXT: return "context";
    case Pool::WEIGHTS: return "weights";
    case Pool::ACTIVATIONS: return "activations";
    case Pool::STAGING: return "staging";
    case Pool::OTHER: return "other";
    case Pool::COUNT_: break;
  }
  return "?";
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    data_ = o.data_;
    size_ = o.size_;
    pool_ = o.pool_;
    owned_ = o.owned_;
    o.owner_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ && data_) owner_->release(data_, size_, pool_, owned_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

Allocator::Allocator(Backend& backend, uint64_t budget, std::shared_ptr<ReclaimPolicy> policy)
    : backend_(backend), budget_(budget), policy_(std::move(policy)) {}

Allocator::~Allocator() {
  std::vector<Reclaimable*> holders;
  {
    std::lock_guard<std::mutex> lock(reclaim_mu_);
    holders.swap(reclaimables_);
  }
  for (Reclaimable* r : holders) r->allocator_gone();
  cache_release(UINT64_MAX);
}

void Allocator::set_budget(uint64_t budget) {
  std::lock_guard<std::mutex> lock(mu_);
  budget_ = budget;
}

MemorySegments Allocator::segments(uint64_t requested) const {
  MemorySegments s;
  s.requested = requested;
  s.budget = budget_;
  s.context = pools_[size_t(Pool::CONTEXT)].current;
  s.weights = pools_[size_t(Pool::WEIGHTS)].current;
  s.activations = pools_[size_t(Pool::ACTIVATIONS)].current;
  s.other = pools_[size_t(Pool::STAGING)].current + pools_[size_t(Pool::OTHER)].current;
  return s;
}

// Note [reclaim]
// An allocation that does not fit (over the budget, or refused by the device because another
// process took memory) is not yet a failure: memory nothing is using now (cached blocks, weight
// copies of models loaded earlier, idle arenas) is given back and the allocation is tried again.
// What goes, and in which order, is the eviction policy's decision (Note [eviction policy] in
// memory/eviction.h), which the allocator calls through ReclaimPolicy; the allocator provides
// the mechanism: its cached blocks (cache_release, cache_yield) and the registered holders
// (holders_visit). Holders are called with no allocator lock held (they free through
// DeviceBuffer::reset, which takes mu_) but under reclaim_mu_, so that none unregisters (and
// dies) while it is asked. Without a policy only the allocator's own cached blocks go.
Result<DeviceBuffer> Allocator::allocate(size_t bytes, Pool pool, const std::string& what) {
  return allocate_reclaiming(bytes, pool, what, nullptr);
}

// Note [adopted bytes]
// The CPU backend computes on the host copies of weights directly; copying them into allocator
// memory would double the host memory of a model just to count it. adopt() counts those bytes
// instead, so a budget on the CPU behaves as on a GPU (weights resident, reclaimed, streamed)
// while the memory stays where it is. Like allocate(), it asks idle holders for room first.
Result<DeviceBuffer> Allocator::adopt(void* p, size_t bytes, Pool pool, const std::string& what) {
  return allocate_reclaiming(bytes, pool, what, p);
}

// allocate_once, and again after each step of the policy that frees memory (Note [reclaim]).
Result<DeviceBuffer> Allocator::allocate_reclaiming(size_t bytes, Pool pool,
                                                    const std::string& what, void* external) {
  size_t rounded = align_up(bytes);
  if (rounded == 0) rounded = kDeviceAlignment;
  Result<DeviceBuffer> r = allocate_once(rounded, pool, what, external);
  auto retry = [&] {
    r = allocate_once(rounded, pool, what, external);
    return r.ok() || r.status().code() != ErrorCode::OUT_OF_MEMORY;
  };
  if (r.ok() || r.status().code() != ErrorCode::OUT_OF_MEMORY) return r;
  if (policy_)
    policy_->make_room(*this, ReclaimRequest{rounded, pool, external != nullptr}, retry);
  else if (cache_yield(rounded))
    retry();
  return r;
}

bool Allocator::cache_yield(size_t rounded) {
  return cache_release(fits_budget(rounded) ? UINT64_MAX : missing_for(rounded)) > 0;
}

bool Allocator::fits_budget(size_t rounded) const {
  std::lock_guard<std::mutex> lock(mu_);
  return budget_ == kUnlimited ||
         (total_.current <= budget_ && rounded <= budget_ - total_.current);
}

uint64_t Allocator::missing_for(size_t rounded) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (budget_ != kUnlimited && total_.current < budget_ && budget_ - total_.current < rounded)
    return rounded - (budget_ - total_.current);
  return rounded;  // over the budget already, or the device refused
}

void Allocator::reclaimable_add(Reclaimable* r) {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  reclaimables_.push_back(r);
}

void Allocator::reclaimable_remove(Reclaimable* r) {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  reclaimables_.erase(std::remove(reclaimables_.begin(), reclaimables_.end(), r),
                      reclaimables_.end());
}

void Allocator::holders_visit(const std::function<void(const std::vector<Reclaimable*>&)>& fn) {
  std::lock_guard<std::mutex> lock(reclaim_mu_);
  fn(reclaimables_);
}

// The policy's decisions (Note [eviction policy]); without one, only cached blocks count and go.
uint64_t Allocator::reclaim(uint64_t bytes) {
  return policy_ ? policy_->reclaim(*this, bytes) : cache_release(bytes);
}

uint64_t Allocator::reclaimable_bytes(const Reclaimable* keep, const Reclaimable* also) {
  return policy_ ? policy_->reclaimable_bytes(*this, keep, also) : stats(Pool::WEIGHTS).cached;
}

uint64_t Allocator::trim_weights() { return policy_ ? policy_->trim_weights(*this) : 0; }

// Note [weight block cache]
// Evicting a weight used to free its block with cudaFree, which waits for the whole device, and
// the next weight uploaded needed a cudaMalloc of its own. Switching between two checkpoints of
// one architecture under a budget (the common case on a server: two SDXL fine-tunes) did that
// for every one of their ~1700 tensors. Now a freed weight block stays held in the weights pool
// as an idle cached block (PoolStats::cached), still counted against the budget, and the next
// weight of exactly its size takes it without a device call. Under the eviction policy (Note
// [eviction policy] in memory/eviction.h) a weight that does not fit asks idle holders for a
// block of its exact size first (Reclaimable::reclaim_block), so the new model's tensors land in
// the old one's blocks one by one. Exact sizes only: a larger block would hold bytes the plans do
// not count. Idle blocks are the first other memory an allocation that does not fit gets (before
// idle holders are asked; all of them when the device refused within the budget: cache_yield),
// count as reclaimable room (reclaimable_bytes), and are given back by reclaim,
// trim_weights, an executor whose new plan streams weights that were resident or that recovers
// from an out-of-memory error, and when the cache would exceed its cap (1 GiB by default;
// without a budget nothing else would free them).
// A block's last reader may still be queued when it is freed (cudaFree used to wait for it), so
// a block goes out again only after a device-wide wait that began after it was cached; one wait
// covers every block cached before it, so a model switch waits about once per reclaim, not per
// tensor.
void Allocator::set_weight_cache_cap(uint64_t cap) {
  cache_cap_ = cap;
  const uint64_t cached = stats(Pool::WEIGHTS).cached;
  if (cached > cap) cache_release(cached - cap);
}

Result<DeviceBuffer> Allocator::cache_take(size_t rounded, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = cache_.find(rounded);
  if (it == cache_.end()) return DeviceBuffer();
  const auto [p, cached_at] = it->second;
  cache_.erase(it);
  pools_[size_t(Pool::WEIGHTS)].cached -= rounded;
  total_.cached -= rounded;
  ++pools_[size_t(Pool::WEIGHTS)].reused;
  ++total_.reused;
  DeviceBuffer b;
  b.owner_ = this;
  b.data_ = p;
  b.size_ = rounded;
  b.pool_ = Pool::WEIGHTS;
  if (syncs_done_ > cached_at) return b;  // a wait that began after it was cached has ended
  const uint64_t n = ++syncs_started_;
  lock.unlock();
  Status st = backend_.device_sync();
  // Unlocked: on failure `b` goes back to the cache as it is destroyed, which takes mu_.
  if (!st.ok()) return Status(st.code(), fmt::format("{}: {}", what, st.message()));
  lock.lock();
  syncs_done_ = std::max(syncs_done_, n);
  return b;
}

uint64_t Allocator::cache_release(uint64_t bytes) {
  uint64_t freed = 0;
  while (freed < bytes) {
    void* p = nullptr;
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cache_.empty()) break;
      auto it = std::prev(cache_.end());  // the largest first: fewest device calls
      p = it->second.first;
      n = it->first;
      cache_.erase(it);
      pools_[size_t(Pool::WEIGHTS)].cached -= n;
      total_.cached -= n;
    }
    release(p, n, Pool::WEIGHTS, true, /*to_cache=*/false);
    freed += n;
  }
  return freed;
}

Result<DeviceBuffer> Allocator::allocate_once(size_t rounded, Pool pool, const std::string& what,
                                              void* external) {
  if (pool == Pool::WEIGHTS && !external) {  // Note [weight block cache]
    Result<DeviceBuffer> c = cache_take(rounded, what);
    if (!c.ok() || *c) return c;
  }
  std::unique_lock<std::mutex> lock(mu_);
  PoolStats& ps = pools_[size_t(pool)];
  if (budget_ != kUnlimited && (total_.current > budget_ || rounded > budget_ - total_.current)) {
    ++ps.failures;
    ++total_.failures;
    Status s(ErrorCode::OUT_OF_MEMORY,
             fmt::format("{} needs {} bytes in pool '{}' but only {} of the {}-byte budget are free",
                         what, rounded, pool_name(pool),
                         total_.current > budget_ ? 0 : budget_ - total_.current, budget_));
    s.set_segments(segments(rounded));
    return s;
  }
  // Note [budget commit]: the bytes are counted before the lock is dropped for the device
  // call, so two allocations at once can never both pass the check and overshoot the budget;
  // a refused device allocation gives them back.
  const PoolStats before_pool = ps, before_total = total_;
  for (PoolStats* st : {&ps, &total_}) {
    st->current += rounded;
    st->allocated += rounded;
    st->allocations += 1;
    if (st->current > st->peak) st->peak = st->current;
  }
  Result<void*> p = external;
  if (!external) {
    lock.unlock();
    p = backend_.device_alloc(rounded);
    lock.lock();
  }
  if (!p.ok()) {
    for (auto [st, before] : {std::pair{&ps, &before_pool}, std::pair{&total_, &before_total}}) {
      st->current -= rounded;
      st->allocated -= rounded;
      st->allocations -= 1;
      // The reservation may have raised the peak; no byte was ever held, so undo that.
      if (st->peak > before->peak && st->peak == st->current + rounded)
        st->peak = std::max(before->peak, st->current);
      ++st->failures;
    }
    Status s(ErrorCode::OUT_OF_MEMORY,
             fmt::format("{}: device refused {} bytes in pool '{}': {}", what, rounded,
                         pool_name(pool), p.status().message()));
    s.set_segments(segments(rounded));
    return s;
  }
  if (total_.current > window_.total) window_mark();  // Note [peak window]
  DeviceBuffer b;
  b.owner_ = this;
  b.data_ = *p;
  b.size_ = rounded;
  b.pool_ = pool;
  b.owned_ = external == nullptr;
  return b;
}

void Allocator::release(void* p, size_t bytes, Pool pool, bool owned, bool to_cache) {
  if (to_cache && owned && pool == Pool::WEIGHTS) {  // Note [weight block cache]
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& w = pools_[size_t(Pool::WEIGHTS)];
    if (w.cached + bytes <= cache_cap_.load()) {
      cache_.emplace(bytes, std::pair{p, syncs_started_});
      w.cached += bytes;
      total_.cached += bytes;
      return;
    }
  }
  if (owned) backend_.device_free(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStats* st : {&pools_[size_t(pool)], &total_}) {
    st->current -= bytes;
    st->freed += bytes;
  }
}

PoolStats Allocator::stats(Pool pool) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pools_[size_t(pool)];
}

PoolStats Allocator::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

void Allocator::window_mark() {
  window_.total = total_.current;
  for (size_t i = 0; i < pools_.size(); ++i) window_.pools[i] = pools_[i].current;
}

PeakWindow Allocator::peak_window_take() {
  std::lock_guard<std::mutex> lock(mu_);
  PeakWindow w = window_;
  window_mark();
  return w;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStats& s : pools_) s.peak = s.current;
  total_.peak = total_.current;
}

// Note [pinned budget]
void* Allocator::pinned_alloc(size_t bytes) {
  PinnedAccount& a = *pinned_;
  uint64_t held = a.held.load();
  do {
    if (held + bytes > a.budget.load()) return nullptr;
  } while (!a.held.compare_exchange_weak(held, held + bytes));
  Result<void*> p = backend_.host_alloc_pinned(bytes);
  if (!p.ok()) {
    a.held -= bytes;
    return nullptr;
  }
  uint64_t peak = a.peak.load();
  while (held + bytes > peak && !a.peak.compare_exchange_weak(peak, held + bytes)) {
  }
  return *p;
}

}  // namespace hr
