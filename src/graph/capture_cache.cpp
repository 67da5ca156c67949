// The bounded cache of captured runs and their page-locked input staging.
#include "graph/capture_cache.h"

#include <algorithm>

namespace hr {

CaptureCache::CaptureCache(Backend& backend, Allocator& allocator)
    : backend_(backend), allocator_(allocator) {}

CaptureCache::~CaptureCache() { clear(); }

void CaptureCache::clear() {
  for (auto& [k, c] : map_) staging_free(c.staging);
  map_.clear();
}

void CaptureCache::staging_free(std::vector<std::pair<void*, size_t>>& staging) {
  for (auto& [p, n] : staging)
    if (p) {
      backend_.host_free_pinned(p);
      allocator_.pinned_account()->held -= n;  // Note [pinned budget]
      ++allocator_.pinned_account()->frees;
    }
  staging.clear();
}

// Note [bounded caches] in compile_cache.cpp.
Capture& CaptureCache::entry(const std::shared_ptr<const CompiledGraph>& c) {
  auto it = map_.find(c.get());
  if (it == map_.end()) {
    while (!map_.empty() && map_.size() >= std::max<size_t>(limit_.load(), 1)) {
      auto oldest = map_.begin();
      for (auto k = map_.begin(); k != map_.end(); ++k)
        if (k->second.used < oldest->second.used) oldest = k;
      staging_free(oldest->second.staging);
      map_.erase(oldest);
    }
    it = map_.emplace(c.get(), Capture{}).first;
    it->second.plan = c;
  }
  it->second.used = ++tick_;
  return it->second;
}

const Capture* CaptureCache::find(const CompiledGraph* c) const {
  auto it = map_.find(c);
  return it == map_.end() ? nullptr : &it->second;
}

bool CaptureCache::staging_make(Capture& cap, const std::vector<Value>& vals) {
  if (cap.staging.size() == vals.size()) return true;
  staging_free(cap.staging);
  cap.staging.assign(vals.size(), {nullptr, 0});
  for (size_t v = 0; v < vals.size(); ++v) {
    if (vals[v].kind != ValueKind::INPUT || vals[v].desc.bytes() == 0) continue;
    void* p = allocator_.pinned_alloc(vals[v].desc.bytes());
    if (!p) {
      staging_free(cap.staging);
      return false;
    }
    cap.staging[v] = {p, vals[v].desc.bytes()};
  }
  return true;
}

// Note [captures and freed memory]
// A recorded kernel holds raw addresses, but a recorded copy holds what the driver resolved
// the addresses to when the graph was instantiated. If the arena, the ring or a page-locked
// source is freed and a new block lands at the same address, comparing addresses says the
// capture is still good, and its replay makes the driver read the freed block's records
// (seen on the H200: a segfault inside cudaGraphLaunch when SDXL's bigG encoder ran again
// after the CLIP-L encoder had freed the ring). So a capture also remembers the generation of
// the executor's buffers and, when it streams, the count of page-locked blocks freed.
bool CaptureCache::current(const Capture& cap, const void* arena,
                           const std::vector<const void*>& sig, uint64_t buffers_gen,
                           bool streams) const {
  if (cap.arena != arena || cap.weights != sig || cap.buffers_gen != buffers_gen) return false;
  return !streams || cap.pinned_frees == allocator_.pinned_account()->frees.load();
}

void CaptureCache::record(Capture& cap, std::unique_ptr<CapturedWork> work, void* arena,
                          std::vector<const void*> sig, uint64_t buffers_gen) {
  cap.work = std::move(work);
  cap.arena = arena;
  cap.weights = std::move(sig);
  cap.buffers_gen = buffers_gen;
  cap.pinned_frees = allocator_.pinned_account()->frees.load();
}

}  // namespace hr
