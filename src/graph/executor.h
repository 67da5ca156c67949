// The executor: plans a graph (arena planner, cached per structure key), allocates the
// activation arena once through the Allocator, binds weights by name from a WeightSource and
// runs the nodes in order on a Backend.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/device_profile.h"
#include "graph/graph.h"
#include "graph/passes.h"
#include "graph/residency.h"

namespace hr {

struct ArenaPlan;  // graph/planner.h
struct CompiledGraph;  // below

// One weight a graph reads, as it asks for it.
struct WeightRequest {
  std::string name;
  TensorDesc desc;
  WeightLayout layout = WeightLayout::STORED;
};

// Supplies weights at execution time: memory on the executing backend, in the dtype, shape
// and layout (Note [weight layouts] in graph.h) the graph declared. The pointer must stay
// valid until the run returns.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                                       WeightLayout layout) = 0;
  // Host memory holding a weight the executor streams (Note [streamed execution] in
  // executor.cpp): page-locked where the backend has such memory, in the given layout, valid
  // and unchanged until run_end. Sources that cannot stream return UNSUPPORTED.
  virtual Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                        WeightLayout layout) {
    return make_error(ErrorCode::UNSUPPORTED, "this weight source cannot stream '{}'", name);
  }
  // weight_host for several weights, in streaming order. Note [coalesced copies] in
  // executor.cpp: a source that can places the host copies it makes now one after the other,
  // each at an offset rounded up to `align`, so that neighbours in the staging ring are
  // neighbours in host memory too and one transfer moves them. The default asks one by one.
  virtual Result<std::vector<TensorRef>> weight_host_all(const std::vector<WeightRequest>& requests,
                                                         size_t align) {
    std::vector<TensorRef> out;
    out.reserve(requests.size());
    for (const WeightRequest& q : requests) {
      Result<TensorRef> r = weight_host(q.name, q.desc, q.layout);
      if (!r.ok()) return r.status();
      out.push_back(*r);
    }
    return out;
  }
  // Frees the device copy of a weight that is streamed from now on (no-op when there is none).
  virtual void weight_evict(const std::string& name, WeightLayout layout) {}
  // Device bytes (allocator level) its resident copies hold now, and itself as a holder the
  // allocator may ask for room, if it is one: the executor counts both as room for this run.
  virtual uint64_t resident_bytes() const { return 0; }
  virtual const Reclaimable* holder() const { return nullptr; }
  // Bracket one Executor::run: weights served in between stay where they are until run_end
  // (Note [reclaim] in backend/allocator.cpp).
  virtual void run_begin() {}
  virtual void run_end() {}
};

using HostInputs = std::vector<std::pair<std::string, const HostTensor*>>;

// What one successful Executor::run held, as a memory plan reports it per node (Note [plan run]
// in workflow/workflow_plan.cpp).
struct RunRecord {
  const WeightSource* weights = nullptr;  // whose weights
  uint64_t weight_bytes = 0;    // the compiled graph's weights
  uint64_t resident_bytes = 0;  // the source's device copies after the run
  uint64_t streamed_bytes = 0;  // weights streamed through the ring
  uint64_t ring_bytes = 0;
  std::string residency;        // residency_describe() when it streamed, else empty
  uint64_t arena_bytes = 0;
  uint64_t workspace_bytes = 0;  // the largest single op workspace
};

// Its activation arena is Reclaimable (Note [reclaim] in backend/allocator.cpp): while no run
// is in progress the allocator may free it for another allocation; the next run allocates again.
class Executor final : public Reclaimable {
 public:
  Executor(Backend& backend, Allocator& allocator);
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs g: binds `inputs` (host tensors, copied to the backend) to the graph's INPUT values
  // by name, weights from `weights`, and returns the outputs (copied to the host) in the
  // order they were marked. Fails with a Status naming the node on any error.
  Result<std::vector<HostTensor>> run(const Graph& g, const HostInputs& inputs,
                                      WeightSource& weights);

  // What run() executes for g: g after the graph passes for this backend (Note [graph passes]
  // in graph/passes.h) and that graph's arena plan. Computed on first use and cached by
  // Graph::structure_key. Safe to call from several threads.
  Result<std::shared_ptr<const CompiledGraph>> compile(const Graph& g);
  // compile(g)'s plan (it indexes compile(g)->graph's values and nodes).
  Result<std::shared_ptr<const ArenaPlan>> plan(const Graph& g);
  // Graph passes on (the default) or off (the graph runs as built). HEADROOM_GRAPH_PASSES=0 in
  // the environment turns them off at construction. Clears the plan cache.
  void set_passes(bool on);
  bool passes() const { return passes_; }
  // Runs exactly these passes instead of the backend's choice (tests use it to check the
  // channels-last rewrite on the CPU); nullopt returns to the backend's choice.
  void set_pass_options(std::optional<PassOptions> options);
  // CUDA-graph capture on (default where the backend can) or off (HEADROOM_CUDA_GRAPHS=0).
  void set_capture(bool on);

  // Note [node timing]: with timing on, each run() records a timing event after every node
  // and node_ms() holds each node's milliseconds for the last run (indexed like
  // compile(g)->graph's nodes; views take ~0). Runs are not captured while timing, but when a
  // captured replay of the same plan exists it is launched a few times first so that the device
  // runs the timed nodes back to back instead of waiting for the host to issue them.
  void set_node_timing(bool on);
  const std::vector<double>& node_ms() const { return node_ms_; }
  // Note [streaming timeline]: a timed run that streams also records when each copy group ended
  // on the copy stream; with the nodes' end times this shows where compute waited for copies and
  // where the copy stream idled. From the last timed run; empty when that run did not stream.
  struct StreamTimeline {
    std::vector<double> node_end_ms;  // per node, from the run's first mark
    std::vector<std::string> node_names;  // per node, of the graph that ran (after the passes)
    struct Group {
      double end_ms = 0;     // from the run's first mark
      uint64_t bytes = 0;    // the group's weights (ring bytes)
      int32_t after = -1;    // the node its copy waited for (-1: none)
      int32_t first = -1;    // the first node reading one of its weights
    };
    std::vector<Group> groups;  // in issue order
  };
  const StreamTimeline& last_timeline() const { return timeline_; }

  // Frees the activation arena that run() keeps between runs (Note [arena reuse] in
  // executor.cpp); waits for a run in progress on another thread.
  void release_arena();
  // Bytes of the arena held now (0 when released).
  size_t arena_held() const { return arena_.size(); }
  // The largest arena a run could allocate now within the allocator's budget: the budget less
  // everything the allocator holds except this executor's own arena and ring (which run() frees
  // before allocating others) and what idle holders other than `keep` (the weights the run will
  // use) would give back (Note [reclaim]). UINT64_MAX when the budget is unlimited.
  uint64_t arena_room(const Reclaimable* keep = nullptr);
  // Residency of the last run's weights (Note [streamed execution] in executor.cpp), with the
  // compiled graph's weight uses it indexes; streams() is false when all were resident.
  const ResidencyPlan& last_residency() const { return residency_; }
  std::string last_residency_text() const;
  // Ring depth and small-weight threshold for streaming (tests use a ring of two slots).
  void set_residency_options(const ResidencyOptions& o) {
    residency_options_ = o;
    residency_cache_.clear();
  }
  // Residency plans made (not found in the cache, Note [residency cache] in executor.cpp).
  size_t residency_plans_made() const { return residency_plans_made_; }
  // CPU milliseconds the last residency plan made took.
  double residency_plan_ms() const { return residency_plan_ms_; }
  const ResidencyOptions& residency_options() const { return residency_options_; }
  // The device's rates (Note [device profile] in device_profile.cpp): the residency clock and
  // copy rate become the profile's, the other residency options stay, and the plans made so
  // far are dropped. Until it is called, device_profile_default for the backend. Like
  // set_residency_options, called before runs.
  void set_device_profile(const DeviceProfile& profile) {
    const ResidencyOptions rates = residency_options_for(profile);
    device_profile_ = profile;
    residency_options_.clock = rates.clock;
    residency_options_.copy_bytes_per_s = rates.copy_bytes_per_s;
    residency_cache_.clear();
  }
  const DeviceProfile& device_profile() const { return device_profile_; }
  // The fewest device bytes one run of g can take: its arena plus the smallest room its weights
  // stream through (residency_min_room).
  Result<uint64_t> min_device_bytes(const Graph& g);
  // The bytes of weights (resident and ring) that a run of g may hold on the device now: the
  // budget less the arena and what others hold and cannot give back, capped by the allocator's
  // weights cap (--lowvram, --novram).
  uint64_t weights_room(const CompiledGraph& c, const WeightSource& w);
  // Called after every successful run() with what it held (null: no observer).
  void set_run_observer(std::function<void(const RunRecord&)> observer) {
    run_observer_ = std::move(observer);
  }
  // Runs that recovered from a failed allocation by planning again (Note [OOM recovery]).
  uint64_t recoveries() const { return recoveries_.load(); }
  // Bytes streamed into the ring since construction.
  uint64_t streamed_total() const { return streamed_total_.load(); }
  // Number of plans computed (cache misses) and served from the cache (hits).
  size_t plans_computed() const;
  size_t plans_cached() const;
  void clear_plans();
  // Note [bounded caches]: the most compiled graphs and captured runs kept; the least recently
  // used go first beyond them.
  struct CacheLimits {
    size_t plans = 48;
    size_t captures = 12;
  };
  void set_cache_limits(const CacheLimits& limits);
  size_t plans_held() const;     // compiled graphs in the cache now
  size_t captures_held() const;  // captured runs kept now (their page-locked input staging too)

  Backend& backend() { return backend_; }
  Allocator& allocator() { return allocator_; }

  uint64_t reclaim(uint64_t bytes) override;
  uint64_t last_use() const override { return last_use_.load(); }
  bool in_use() const override { return running_.load(); }
  uint64_t reclaimable_bytes() const override { return arena_.size() + ring_.size(); }
  // Its allocator is being destroyed (a test or a caller tearing down in the wrong order): the
  // arena, ring and captures go now; the executor must not run again.
  void allocator_gone() override;

 private:
  Backend& backend_;
  Allocator& allocator_;
  std::function<void(const RunRecord&)> run_observer_;
  // run() with its lock held and its weights bracketed; fills `record` on success.
  Result<std::vector<HostTensor>> run_locked(const Graph& g, const HostInputs& inputs,
                                             WeightSource& weights, RunRecord& record);
  mutable std::mutex plans_mu_;
  struct PlanEntry {
    std::shared_ptr<const CompiledGraph> compiled;
    uint64_t used = 0;  // plan_tick_ at its last use
  };
  std::unordered_map<std::string, PlanEntry> plans_;
  uint64_t plan_tick_ = 0;
  CacheLimits cache_limits_;
  // Drops least recently used plans beyond the limit; called with plans_mu_ held.
  void plans_trim();
  bool passes_ = true;
  std::optional<PassOptions> pass_options_;
  bool timing_ = false;
  std::vector<double> node_ms_;
  std::vector<std::unique_ptr<Event>> timing_events_;
  std::vector<std::unique_ptr<Event>> copy_timing_events_;  // Note [streaming timeline]
  StreamTimeline timeline_;
  size_t plans_computed_ = 0;
  size_t plans_cached_ = 0;
  // run() is not reentrant: one run at a time uses the arena.
  std::mutex run_mu_;
  std::atomic<bool> running_{false};  // a run holds run_mu_ (reclaim must not try to lock it)
  std::atomic<uint64_t> last_use_{0};
  bool allocator_alive_ = true;
  DeviceBuffer arena_;
  // Note [streamed execution]: the staging ring, the copy stream and its events.
  DeviceBuffer ring_;
  std::unique_ptr<Stream> copy_stream_;
  std::unique_ptr<Event> start_event_, copies_done_;
  std::vector<std::unique_ptr<Event>> copied_;  // per copy group (at most one per weight use)
  std::vector<std::unique_ptr<Event>> freed_;   // per node
  DeviceProfile device_profile_;
  ResidencyOptions residency_options_;
  ResidencyPlan residency_;
  std::vector<WeightUse> residency_uses_;
  // Note [residency cache]: the plans made for (compiled graph, room), newest last.
  struct CachedResidency {
    std::weak_ptr<const CompiledGraph> compiled;
    uint64_t room = 0;
    ResidencyPlan plan;
  };
  std::vector<CachedResidency> residency_cache_;
  size_t residency_plans_made_ = 0;
  double residency_plan_ms_ = 0;
  std::atomic<uint64_t> streamed_total_{0};

  // What the allocator holds that no run of this executor can use: everything but its arena,
  // ring, `also_mine` (the run's resident weights) and what idle holders other than `keep`
  // would give back.
  uint64_t others_held(const Reclaimable* keep, uint64_t also_mine);
  struct RunState;  // one run's bindings (executor.cpp)
  Result<ResidencyPlan> residency_decide(const std::shared_ptr<const CompiledGraph>& c,
                                         WeightSource& w);
  Result<ResidencyPlan> residency_plan_for(const CompiledGraph& c, uint64_t room);
  Status buffers_prepare(RunState& r, WeightSource& w);
  Status weights_bind(RunState& r, WeightSource& w);
  Status streams_prepare(size_t weights, size_t nodes);
  Status ops_issue(RunState& r);
  Status copies_issue(RunState& r, int32_t after_node);
  Status copy_marks_prepare(RunState& r);  // Note [streaming timeline]
  Status timeline_collect(RunState& r);
  Result<std::vector<HostTensor>> outputs_collect(RunState& r);
  Result<std::vector<HostTensor>> run_timed(RunState& r);
  Result<std::vector<HostTensor>> run_captured(RunState& r);
  Result<std::vector<HostTensor>> run_body(RunState& r);
  Result<std::vector<HostTensor>> run_attempt(const std::shared_ptr<const CompiledGraph>& c,
                                              const std::vector<const HostTensor*>& bound,
                                              WeightSource& w);
  Result<std::vector<HostTensor>> run_recover(const std::shared_ptr<const CompiledGraph>& c,
                                              const std::vector<const HostTensor*>& bound,
                                              WeightSource& w, const Status& failed);
  uint64_t weights_limit_ = UINT64_MAX;  // Note [OOM recovery]: room for weights while retrying
  std::atomic<uint64_t> recoveries_{0};

  // Note [captured steps]: on backends that can capture, the second run of a plan records its
  // ops (and the input copies, from pinned staging) once; later runs with the same arena and
  // weight pointers replay them with one launch. Any capture failure falls back to plain runs.
  struct Capture {
    std::shared_ptr<const CompiledGraph> plan;  // keeps the key pointer alive
    int runs = 0;
    bool failed = false;
    void* arena = nullptr;
    std::vector<const void*> weights;  // the run's weight bindings (RunState::signature)
    uint64_t buffers_gen = 0;   // Note [captures and freed memory] in executor.cpp
    uint64_t pinned_frees = 0;
    std::vector<std::pair<void*, size_t>> staging;  // per INPUT value (pinned host), by ValueId
    std::unique_ptr<CapturedWork> work;
    uint64_t used = 0;  // plan_tick_-like counter of runs (capture_tick_)
  };
  std::unordered_map<const CompiledGraph*, Capture> captures_;
  uint64_t capture_tick_ = 0;
  // The capture entry of `c`, made room for (Note [bounded caches]); called with run_mu_ held.
  Capture& capture_entry(const std::shared_ptr<const CompiledGraph>& c);
  uint64_t buffers_gen_ = 0;  // +1 whenever the arena or the ring is allocated
  bool capture_enabled_ = true;
  void captures_clear();
  bool capture_current(const Capture& cap, const RunState& r,
                       const std::vector<const void*>& sig) const;
  void capture_trace(const char* what, const RunState& r) const;
  void staging_free(std::vector<std::pair<void*, size_t>>& staging);
};

// A graph as the executor runs it: after the passes, with its arena plan.
struct CompiledGraph {
  Graph graph;
  std::shared_ptr<const ArenaPlan> plan;
  std::vector<WeightUse> weights;  // in first-use order (graph/residency.h)
  uint64_t weight_bytes = 0;       // sum of weights[].bytes
};

}  // namespace hr
