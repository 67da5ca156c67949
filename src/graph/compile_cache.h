// The executor's bounded cache of compiled graphs by Graph::structure_key, least recently used
// first out (Note [bounded caches] in compile_cache.cpp), with the settings they were compiled
// with. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graph/compiled_graph.h"

namespace hr {

class CompileCache {
 public:
  // The graph compiled for `key`, or null with `settings` set to what to compile it with.
  std::shared_ptr<const CompiledGraph> find(const std::string& key, CompileSettings& settings);
  // Keeps `c` for `key` unless another thread kept one first; returns the one kept.
  std::shared_ptr<const CompiledGraph> insert(const std::string& key,
                                              std::shared_ptr<const CompiledGraph> c);
  // New settings drop every compiled graph.
  void set_settings(const CompileSettings& settings);
  CompileSettings settings() const;
  void clear();
  void set_limit(size_t plans);
  size_t held() const;
  size_t computed() const;  // compiled (misses)
  size_t cached() const;    // served from the cache (hits)

 private:
  // Drops least recently used plans beyond the limit; called with mu_ held.
  void trim();

  mutable std::mutex mu_;
  struct Entry {
    std::shared_ptr<const CompiledGraph> compiled;
    uint64_t used = 0;  // tick_ at its last use
  };
  std::unordered_map<std::string, Entry> map_;
  CompileSettings settings_;
  uint64_t tick_ = 0;
  size_t limit_ = 48;
  size_t computed_ = 0;
  size_t cached_ = 0;
};

}  // namespace hr
