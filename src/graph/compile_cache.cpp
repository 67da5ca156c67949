// The bounded LRU cache of compiled graphs.
#include "graph/compile_cache.h"

#include <algorithm>

namespace hr {

// Note [bounded caches]
// A server that sees many resolutions compiles a graph per shape, and on the GPU records a
// capture per compiled graph with page-locked staging for its inputs; kept forever, a
// long-running process grew with every new size. Both caches are LRU with a bound: a plan past
// the bound is dropped from the map (a capture that still holds it keeps it alive until the
// capture goes too), and a capture past its bound frees its staging (giving the bytes back to
// the pinned account) and its recorded work (CaptureCache). A shape that comes back compiles and
// captures again, which costs a few milliseconds against a step's tens.
std::shared_ptr<const CompiledGraph> CompileCache::find(const std::string& key,
                                                     CompileSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {
    ++cached_;
    it->second.used = ++tick_;
    return it->second.compiled;
  }
  settings = settings_;
  return nullptr;
}

std::shared_ptr<const CompiledGraph> CompileCache::insert(const std::string& key,
                                                       std::shared_ptr<const CompiledGraph> c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = map_.emplace(key, Entry{std::move(c), 0});
  if (inserted)
    ++computed_;
  else
    ++cached_;
  it->second.used = ++tick_;
  std::shared_ptr<const CompiledGraph> out = it->second.compiled;
  trim();
  return out;
}

void CompileCache::set_settings(const CompileSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = settings;
  map_.clear();
}

CompileSettings CompileCache::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
}

void CompileCache::set_limit(size_t plans) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = plans;
  trim();
}

size_t CompileCache::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

size_t CompileCache::computed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return computed_;
}

size_t CompileCache::cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

void CompileCache::trim() {
  while (map_.size() > std::max<size_t>(limit_, 1)) {
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    map_.erase(oldest);
  }
}

}  // namespace hr
