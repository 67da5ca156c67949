// The executor: compiles a graph (passes and arena plan, cached per structure key:
// executor_compile.cpp), allocates the activation arena once through the Allocator, binds
// weights by name from a WeightSource and runs the nodes in order on a Backend: plainly
// (executor_run.cpp), timed (executor_timed.cpp) or as a captured replay (executor_captured.cpp),
// streaming weights on a copy stream (stream_copies.h). Which weights stream and how a failed
// allocation is recovered are memory policy it is given (Note [executor policies]).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/capture_cache.h"
#include "graph/compiled_graph.h"
#include "graph/device_profile.h"
#include "graph/executor_policies.h"
#include "graph/graph.h"
#include "graph/node_timing.h"
#include "graph/passes.h"
#include "graph/compile_cache.h"
#include "graph/residency.h"
#include "graph/run_state.h"
#include "graph/stream_copies.h"

namespace hr {

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
  // stream_copies.cpp): page-locked where the backend has such memory, in the given layout, valid
  // and unchanged until run_end. Sources that cannot stream return UNSUPPORTED.
  virtual Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                        WeightLayout layout) {
    return make_error(ErrorCode::UNSUPPORTED, "this weight source cannot stream '{}'", name);
  }
  // weight_host for several weights, in streaming order. Note [coalesced copies] in
  // stream_copies.cpp: a source that can places the host copies it makes now one after the other,
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
  // Where weights are served: the backend runs use and the allocator their copies count in.
  virtual void bind(Backend* backend, Allocator* allocator) {}
  // Note [patched streaming]: a source may serve some weights patched (memory/patched_weights.h).
  // A streamed one arrives in the ring as its host copy, unpatched; the executor then calls
  // weight_patch_streamed on the compute stream, after its copy and before its first use, to
  // patch it in place. weight_host_all prepares what that needs (device factors, scratch).
  virtual bool weight_patched(const std::string& name, WeightLayout layout) const {
    return false;
  }
  virtual Status weight_patch_streamed(const WeightRequest& q, void* device, Stream* s) {
    return make_error(ErrorCode::UNSUPPORTED, "this weight source does not patch '{}'", q.name);
  }
  // Device bytes beside the weights themselves that patching needs during a run that streams
  // `streamed` and keeps `resident` (their patches' factors, scratch and GEMM workspace); the
  // executor leaves that much out of the weights' room (Note [patched streaming room]).
  virtual uint64_t patch_room_bytes(const std::vector<WeightRequest>& streamed,
                                    const std::vector<WeightRequest>& resident) const {
    return 0;
  }
  // Whether any weight may be served patched (the executor asks the above only then).
  virtual bool patches_any() const { return false; }
  // For plans (Note [plan run]): what patching the source does, in a sentence ("" when none),
  // and the device bytes it holds for it beside the weights (factors, scratch).
  virtual std::string patch_describe() const { return ""; }
  virtual uint64_t patch_device_bytes() const { return 0; }
  // Device addresses a captured step's patch ops read, beside the weights' own (Note [captures
  // and freed memory]).
  virtual void patch_signature(std::vector<const void*>& sig) const {}
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
  std::string patching;          // WeightSource::patch_describe(), "" when none
  uint64_t patch_bytes = 0;      // WeightSource::patch_device_bytes()
};

// Its activation arena is Reclaimable (Note [reclaim] in backend/allocator.cpp): while no run
// is in progress the allocator may free it for another allocation; the next run allocates again.
class Executor final : public Reclaimable {
 public:
  // `policies` decide residency and OOM recovery (both set; memory/executor_policies.h's
  // executor_policies_default gives memory's).
  Executor(Backend& backend, Allocator& allocator, ExecutorPolicies policies);
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
  bool passes() const { return plans_.settings().passes; }
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
  const std::vector<double>& node_ms() const { return timing_.node_ms; }
  // Note [streaming timeline]: a timed run that streams also records when each copy group ended
  // on the copy stream; with the nodes' end times this shows where compute waited for copies and
  // where the copy stream idled. From the last timed run; empty when that run did not stream.
  using StreamTimeline = hr::StreamTimeline;
  const StreamTimeline& last_timeline() const { return timing_.timeline; }

  // Frees the activation arena that run() keeps between runs (Note [arena reuse] in
  // executor_run.cpp); waits for a run in progress on another thread.
  void release_arena();
  // Bytes of the arena held now (0 when released).
  size_t arena_held() const { return buffers_.arena.size(); }
  // The largest arena a run could allocate now within the allocator's budget: the budget less
  // everything the allocator holds except this executor's own arena and ring (which run() frees
  // before allocating others) and what idle holders other than `keep` (the weights the run will
  // use) would give back (Note [reclaim]). UINT64_MAX when the budget is unlimited.
  uint64_t arena_room(const Reclaimable* keep = nullptr);
  // Residency of the last run's weights (Note [streamed execution] in stream_copies.cpp), with
  // the compiled graph's weight uses it indexes; streams() is false when all were resident.
  const ResidencyPlan& last_residency() const { return residency_.plan; }
  std::string last_residency_text() const;
  // Ring depth and small-weight threshold for streaming (tests use a ring of two slots); drops
  // the residency plans made so far.
  void set_residency_options(const ResidencyOptions& o) { policies_.residency->set_options(o); }
  // Residency plans made (not found in the policy's cache, Note [residency cache] in
  // memory/planned_residency.cpp).
  size_t residency_plans_made() const { return policies_.residency->plans_made(); }
  // CPU milliseconds the last residency plan made took.
  double residency_plan_ms() const { return policies_.residency->plan_ms(); }
  const ResidencyOptions& residency_options() const { return policies_.residency->options(); }
  // The device's rates (Note [device profile] in memory/residency_clock.cpp): the residency
  // clock and copy rate become the profile's, the other residency options stay, and the plans
  // made so far are dropped. Until it is called, the policy's default for the backend. Like
  // set_residency_options, called before runs.
  void set_device_profile(const DeviceProfile& profile) {
    policies_.residency->set_device_profile(profile);
  }
  const DeviceProfile& device_profile() const { return policies_.residency->device_profile(); }
  // The fewest device bytes one run of g can take: its arena plus the smallest room its weights
  // stream through (ResidencyPolicy::min_room).
  Result<uint64_t> min_device_bytes(const Graph& g);
  // The bytes of weights (resident and ring) that a run of g may hold on the device now: the
  // budget less the arena and what others hold and cannot give back, capped by the allocator's
  // weights cap (--lowvram, --novram).
  uint64_t weights_room(const CompiledGraph& c, const WeightSource& w);
  // Device bytes the source needs beside c's weights to patch them in a run under `plan` (null:
  // the most any plan needs): the streamed ones' factors, the resident ones' patched copy of the
  // largest and their factors, scratch and workspace (Note [patched streaming room]).
  static uint64_t patch_room(const CompiledGraph& c, const WeightSource& w,
                             const ResidencyPlan* plan);
  // Called after every successful run() with what it held (null: no observer).
  void set_run_observer(std::function<void(const RunRecord&)> observer) {
    run_observer_ = std::move(observer);
  }
  // Runs that recovered from a failed allocation by planning again (Note [OOM recovery] in
  // memory/oom_recovery.cpp).
  uint64_t recoveries() const { return recovery_.recoveries.load(); }
  // Bytes streamed into the ring since construction.
  uint64_t streamed_total() const { return copies_.streamed_total(); }
  // Number of plans computed (cache misses) and served from the cache (hits).
  size_t plans_computed() const { return plans_.computed(); }
  size_t plans_cached() const { return plans_.cached(); }
  void clear_plans() { plans_.clear(); }
  // Note [bounded caches] in compile_cache.cpp: the most compiled graphs and captured runs kept;
  // the least recently used go first beyond them.
  struct CacheLimits {
    size_t plans = 48;
    size_t captures = 12;
  };
  void set_cache_limits(const CacheLimits& limits);
  size_t plans_held() const { return plans_.held(); }  // compiled graphs in the cache now
  // Captured runs kept now (their page-locked input staging too).
  size_t captures_held() const { return captures_.held(); }

  Backend& backend() { return backend_; }
  Allocator& allocator() { return allocator_; }

  uint64_t reclaim(uint64_t bytes) override;
  uint64_t last_use() const override { return last_use_.load(); }
  bool in_use() const override { return running_.load(); }
  uint64_t reclaimable_bytes() const override {
    return buffers_.arena.size() + buffers_.ring.size();
  }
  // Its allocator is being destroyed (a test or a caller tearing down in the wrong order): the
  // arena, ring and captures go now; the executor must not run again.
  void allocator_gone() override;

 private:
  class Recovery;  // the RecoveryRun of one run (executor_run.cpp)

  // run() with its lock held and its weights bracketed; fills `record` on success.
  Result<std::vector<HostTensor>> run_locked(const Graph& g, const HostInputs& inputs,
                                             WeightSource& weights, RunRecord& record);
  // What the allocator holds that no run of this executor can use: everything but its arena,
  // ring, `also_mine` (the run's resident weights) and what idle holders other than `keep`
  // would give back.
  uint64_t others_held(const Reclaimable* keep, uint64_t also_mine);
  // The residency policy's plan for c within weights_room.
  Result<ResidencyPlan> residency_decide(const std::shared_ptr<const CompiledGraph>& c,
                                         WeightSource& w);
  // The plan within `room` with the streamed weights' patch factors beside it (Note [patched
  // streaming room] in executor.cpp).
  Result<ResidencyPlan> residency_within(const std::shared_ptr<const CompiledGraph>& c,
                                         const WeightSource& w, uint64_t room);
  Status buffers_prepare(RunState& r, WeightSource& w);
  Status weights_bind(RunState& r, WeightSource& w);
  Status ops_issue(RunState& r);
  Result<std::vector<HostTensor>> outputs_collect(RunState& r);
  // The strategies: run_body picks timed, captured or plain.
  Result<std::vector<HostTensor>> run_body(RunState& r);
  Result<std::vector<HostTensor>> run_plain(RunState& r);
  Result<std::vector<HostTensor>> run_timed(RunState& r);
  Result<std::vector<HostTensor>> run_captured(RunState& r);
  Status copy_marks_prepare(RunState& r);  // Note [streaming timeline]
  Status timeline_collect(RunState& r);
  void capture_trace(const char* what, const RunState& r) const;
  Result<std::vector<HostTensor>> run_attempt(const std::shared_ptr<const CompiledGraph>& c,
                                              const std::vector<const HostTensor*>& bound,
                                              WeightSource& w);

  Backend& backend_;
  Allocator& allocator_;
  ExecutorPolicies policies_;  // residency and recovery (Note [executor policies])
  CompileCache plans_;         // compiled graphs
  CaptureCache captures_;      // Note [captured steps]
  CopyLane copies_;            // Note [streamed execution]
  NodeTiming timing_;          // Note [node timing]
  RunBuffers buffers_;         // Note [arena reuse]
  struct LastResidency {
    ResidencyPlan plan;
    std::vector<WeightUse> uses;
  } residency_;
  struct RecoveryState {
    uint64_t weights_limit = UINT64_MAX;  // room for weights while a recovery retries
    std::atomic<uint64_t> recoveries{0};
  } recovery_;
  std::function<void(const RunRecord&)> run_observer_;
  // run() is not reentrant: one run at a time uses the arena.
  std::mutex run_mu_;
  std::atomic<bool> running_{false};  // a run holds run_mu_ (reclaim must not try to lock it)
  std::atomic<uint64_t> last_use_{0};
  bool allocator_alive_ = true;
};

}  // namespace hr
