// The executor's captured runs (Note [captured steps] in executor_captured.cpp): one per compiled
// graph, with the page-locked staging of its inputs, bounded and least recently used first out
// (Note [bounded caches] in compile_cache.cpp), and whether a capture is still good for a run's
// bindings (Note [captures and freed memory] in capture_cache.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/compiled_graph.h"

namespace hr {

// One compiled graph's capture.
struct Capture {
  std::shared_ptr<const CompiledGraph> plan;  // keeps the key pointer alive
  int runs = 0;
  bool failed = false;
  void* arena = nullptr;
  std::vector<const void*> weights;  // the run's weight bindings (RunState::signature)
  uint64_t buffers_gen = 0;          // Note [captures and freed memory]
  uint64_t pinned_frees = 0;
  std::vector<std::pair<void*, size_t>> staging;  // per INPUT value (pinned host), by ValueId
  std::unique_ptr<CapturedWork> work;
  uint64_t used = 0;  // CaptureCache's tick at its last use
};

// Not thread-safe: the executor uses it with its run lock held.
class CaptureCache {
 public:
  CaptureCache(Backend& backend, Allocator& allocator);
  ~CaptureCache();
  CaptureCache(const CaptureCache&) = delete;
  CaptureCache& operator=(const CaptureCache&) = delete;

  // Capture on (where the backend can) or off.
  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on && backend_.capture_supported(); }
  // The entry of `c`, made room for and counted as used.
  Capture& entry(const std::shared_ptr<const CompiledGraph>& c);
  // The entry of `c` if there is one (not counted as used).
  const Capture* find(const CompiledGraph* c) const;
  // Frees every capture and its staging.
  void clear();
  size_t held() const { return map_.size(); }
  void set_limit(size_t captures) { limit_ = captures; }

  // Page-locked staging for every INPUT value of `values` (kept while it has their count);
  // false, with none kept, when the pinned budget has no room for them.
  bool staging_make(Capture& cap, const std::vector<Value>& values);
  // Whether `cap`'s recorded work is good for a run with this arena, weight signature and
  // buffer generation (Note [captures and freed memory]).
  bool current(const Capture& cap, const void* arena, const std::vector<const void*>& signature,
               uint64_t buffers_gen, bool streams) const;
  // Keeps `work` as cap's recording with what it depends on.
  void record(Capture& cap, std::unique_ptr<CapturedWork> work, void* arena,
              std::vector<const void*> signature, uint64_t buffers_gen);

 private:
  void staging_free(std::vector<std::pair<void*, size_t>>& staging);

  Backend& backend_;
  Allocator& allocator_;
  bool enabled_ = false;
  std::unordered_map<const CompiledGraph*, Capture> map_;
  uint64_t tick_ = 0;
  std::atomic<size_t> limit_{12};
};

}  // namespace hr
