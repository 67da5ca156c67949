// EvictionPolicy: the order memory is given back in (Note [eviction policy]).
#include "memory/eviction.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace hr {

namespace {

// Holders not in use, least recently used first.
std::vector<Reclaimable*> idle_holders(const std::vector<Reclaimable*>& holders) {
  std::vector<Reclaimable*> order;
  for (Reclaimable* r : holders)
    if (!r->in_use()) order.push_back(r);
  std::sort(order.begin(), order.end(),
            [](Reclaimable* a, Reclaimable* b) { return a->last_use() < b->last_use(); });
  return order;
}

}  // namespace

// Note [eviction policy]: steps 1-4, each followed by a retry.
void EvictionPolicy::make_room(Allocator& a, const ReclaimRequest& request,
                               const std::function<bool()>& retry) {
  const size_t rounded = request.rounded;
  if (request.pool == Pool::WEIGHTS && !request.external && holders_block(a, rounded) > 0 &&
      retry())
    return;  // the block just cached
  if (a.cache_yield(rounded) && retry()) return;
  if (holders_free(a, a.missing_for(rounded)) == 0) return;
  if (retry() || a.cache_release(a.missing_for(rounded)) == 0) return;
  retry();
}

// Cached blocks first, then what idle holders free (which passes through the cache on its way
// back, Note [weight block cache]).
uint64_t EvictionPolicy::reclaim(Allocator& a, uint64_t bytes) {
  uint64_t freed = a.cache_release(bytes);
  if (freed >= bytes) return freed;
  const uint64_t asked = holders_free(a, bytes - freed);
  a.cache_release(asked);
  return freed + asked;
}

uint64_t EvictionPolicy::reclaimable_bytes(Allocator& a, const Reclaimable* keep,
                                           const Reclaimable* also) {
  uint64_t n = 0;
  a.holders_visit([&](const std::vector<Reclaimable*>& holders) {
    for (Reclaimable* r : holders)
      if (r != keep && r != also && !r->in_use()) n += r->reclaimable_bytes();
  });
  return n + a.stats(Pool::WEIGHTS).cached;
}

// Weights above the cap go back to the device, cached blocks included (--lowvram and --novram
// promise that the memory is free between uses).
uint64_t EvictionPolicy::trim_weights(Allocator& a) {
  const uint64_t cap = a.weights_cap();
  if (cap == UINT64_MAX) return 0;
  const PoolStats w = a.stats(Pool::WEIGHTS);
  const uint64_t held = w.current - w.cached;
  const uint64_t freed = held > cap ? holders_free(a, held - cap) : 0;
  a.cache_release(UINT64_MAX);
  return freed;
}

uint64_t EvictionPolicy::holders_free(Allocator& a, uint64_t bytes) {
  uint64_t freed = 0;
  a.holders_visit([&](const std::vector<Reclaimable*>& holders) {
    for (Reclaimable* r : idle_holders(holders)) {
      if (freed >= bytes) break;
      freed += r->reclaim(bytes - freed);
    }
  });
  a.reclaimed_add(freed);
  return freed;
}

uint64_t EvictionPolicy::holders_block(Allocator& a, uint64_t bytes) {
  uint64_t got = 0;
  a.holders_visit([&](const std::vector<Reclaimable*>& holders) {
    for (Reclaimable* r : idle_holders(holders))
      if (const uint64_t n = r->reclaim_block(bytes); n > 0) {
        got = n;
        return;
      }
  });
  a.reclaimed_add(got);
  return got;
}

std::shared_ptr<ReclaimPolicy> eviction_policy() {
  static const std::shared_ptr<ReclaimPolicy> policy = std::make_shared<EvictionPolicy>();
  return policy;
}

std::vector<std::string> eviction_order(std::vector<EvictionCandidate> copies, uint64_t bytes) {
  std::sort(copies.begin(), copies.end(),
            [](const EvictionCandidate& x, const EvictionCandidate& y) {
              return std::tie(x.last_use, x.key) < std::tie(y.last_use, y.key);
            });
  std::vector<std::string> out;
  uint64_t chosen = 0;
  for (EvictionCandidate& c : copies) {
    if (chosen >= bytes) break;
    chosen += c.bytes;
    out.push_back(std::move(c.key));
  }
  return out;
}

const EvictionCandidate* eviction_block(const std::vector<EvictionCandidate>& copies) {
  const EvictionCandidate* oldest = nullptr;
  for (const EvictionCandidate& c : copies)
    if (!oldest || c.last_use < oldest->last_use) oldest = &c;
  return oldest;
}

uint64_t device_copies_evict(DeviceCopies& copies, uint64_t bytes) {
  std::vector<EvictionCandidate> candidates;
  for (const auto& [k, c] : copies) candidates.push_back({k, c.last_use, c.buffer.size()});
  uint64_t freed = 0;
  for (const std::string& k : eviction_order(std::move(candidates), bytes)) {
    auto it = copies.find(k);
    freed += it->second.buffer.size();
    copies.erase(it);
  }
  return freed;
}

uint64_t device_copies_evict_block(DeviceCopies& copies, uint64_t bytes) {
  std::vector<EvictionCandidate> candidates;  // the weight blocks of exactly that size
  for (const auto& [k, c] : copies)
    if (c.buffer.size() == bytes && c.buffer.pool() == Pool::WEIGHTS)
      candidates.push_back({k, c.last_use, bytes});
  const EvictionCandidate* oldest = eviction_block(candidates);
  if (!oldest) return 0;
  copies.erase(oldest->key);
  return bytes;
}

uint64_t device_copies_bytes(const DeviceCopies& copies) {
  uint64_t n = 0;
  for (const auto& [k, c] : copies) n += c.buffer.size();
  return n;
}

}  // namespace hr
