// The executor: plan cache, the one activation arena, input/weight binding, running the
// nodes in order on the backend's default stream, and copying outputs back to the host.
#include "graph/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "core/alignment.h"
#include "graph/passes.h"
#include "core/bytes.h"
#include "graph/planner.h"

namespace hr {

// Note [arena reuse]
// run() keeps its arena between runs and reallocates only when a plan needs more. All work of
// a run (input copies, kernels, output copies) is ordered on the backend's default stream and
// run() ends with stream_sync, so when the next run (or release_arena) touches the arena no
// earlier work can still be reading or writing it (Note [stream-ordered reuse] in STYLE.md:
// the arena belongs to the default stream only). On an error run() also syncs before returning.

Executor::Executor(Backend& backend, Allocator& allocator)
    : backend_(backend), allocator_(allocator) {
  capture_enabled_ = backend_.capture_supported() && env_switch("HEADROOM_CUDA_GRAPHS", true);
  passes_ = env_switch("HEADROOM_GRAPH_PASSES", true);
  allocator_.reclaimable_add(this);
  device_profile_ = device_profile_default(backend_.host_visible());
  residency_options_ = residency_options_for(device_profile_);
  // The copy stream and its fixed events exist before they are needed: the moment a run first
  // streams may be the moment the device has no memory left for them (Note [OOM recovery]).
  if (!backend_.host_visible()) (void)streams_prepare(0, 0);
}

void Executor::set_passes(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  captures_clear();
  std::lock_guard<std::mutex> lock(plans_mu_);
  passes_ = on;
  plans_.clear();
}

void Executor::set_pass_options(std::optional<PassOptions> options) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  captures_clear();
  std::lock_guard<std::mutex> lock(plans_mu_);
  pass_options_ = options;
  plans_.clear();
}

void Executor::set_capture(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  capture_enabled_ = on && backend_.capture_supported();
}

void Executor::set_node_timing(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  timing_ = on;
  node_ms_.clear();
}

Executor::~Executor() {
  if (allocator_alive_) allocator_.reclaimable_remove(this);
  captures_clear();
}

void Executor::allocator_gone() {
  std::lock_guard<std::mutex> lock(run_mu_);
  captures_clear();
  arena_.reset();
  ring_.reset();
  allocator_alive_ = false;
}

uint64_t Executor::reclaim(uint64_t bytes) {
  if (running_) return 0;
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  const uint64_t freed = arena_.size() + ring_.size();
  arena_.reset();
  ring_.reset();
  return freed;
}

void Executor::captures_clear() {
  for (auto& [k, c] : captures_) staging_free(c.staging);
  captures_.clear();
}

void Executor::staging_free(std::vector<std::pair<void*, size_t>>& staging) {
  for (auto& [p, n] : staging)
    if (p) {
      backend_.host_free_pinned(p);
      allocator_.pinned_account()->held -= n;  // Note [pinned budget]
      ++allocator_.pinned_account()->frees;
    }
  staging.clear();
}

size_t Executor::plans_computed() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_computed_;
}

size_t Executor::plans_cached() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_cached_;
}

void Executor::clear_plans() {
  std::lock_guard<std::mutex> lock(plans_mu_);
  plans_.clear();
}

// Note [bounded caches]
// A server that sees many resolutions compiles a graph per shape, and on the GPU records a
// capture per compiled graph with page-locked staging for its inputs; kept forever, a
// long-running process grew with every new size. Both caches are LRU with a bound: a plan past
// the bound is dropped from the map (a capture that still holds it keeps it alive until the
// capture goes too), and a capture past its bound frees its staging (giving the bytes back to
// the pinned account) and its recorded work. A shape that comes back compiles and captures
// again, which costs a few milliseconds against a step's tens.
void Executor::set_cache_limits(const CacheLimits& limits) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  cache_limits_ = limits;
  plans_trim();
}

size_t Executor::plans_held() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_.size();
}

size_t Executor::captures_held() const { return captures_.size(); }

void Executor::plans_trim() {
  while (plans_.size() > std::max<size_t>(cache_limits_.plans, 1)) {
    auto oldest = plans_.begin();
    for (auto it = plans_.begin(); it != plans_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    plans_.erase(oldest);
  }
}

Executor::Capture& Executor::capture_entry(const std::shared_ptr<const CompiledGraph>& c) {
  auto it = captures_.find(c.get());
  if (it == captures_.end()) {
    while (!captures_.empty() && captures_.size() >= std::max<size_t>(cache_limits_.captures, 1)) {
      auto oldest = captures_.begin();
      for (auto k = captures_.begin(); k != captures_.end(); ++k)
        if (k->second.used < oldest->second.used) oldest = k;
      staging_free(oldest->second.staging);
      captures_.erase(oldest);
    }
    it = captures_.emplace(c.get(), Capture{}).first;
    it->second.plan = c;
  }
  it->second.used = ++capture_tick_;
  return it->second;
}

void Executor::release_arena() {
  std::lock_guard<std::mutex> lock(run_mu_);
  arena_.reset();
  ring_.reset();
}

uint64_t Executor::others_held(const Reclaimable* keep, uint64_t also_mine) {
  const uint64_t held = allocator_.total().current;
  const uint64_t mine = arena_.size() + ring_.size() + also_mine;
  return held - std::min(held, mine + allocator_.reclaimable_bytes(keep, this));
}

uint64_t Executor::arena_room(const Reclaimable* keep) {
  const uint64_t budget = allocator_.budget();
  if (budget == Allocator::kUnlimited) return UINT64_MAX;
  const uint64_t others = others_held(keep, 0);
  return budget > others ? budget - others : 0;
}

Result<std::shared_ptr<const ArenaPlan>> Executor::plan(const Graph& g) {
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, compile(g));
  return c->plan;
}

Result<std::shared_ptr<const CompiledGraph>> Executor::compile(const Graph& g) {
  if (!g.status().ok()) return g.status().with_context("graph has a build error");
  const std::string& key = g.structure_key();
  bool passes;
  std::optional<PassOptions> forced;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      ++plans_cached_;
      it->second.used = ++plan_tick_;
      return it->second.compiled;
    }
    passes = passes_;
    forced = pass_options_;
  }
  // Compiled outside the lock: a second thread compiling the same key wastes only time.
  auto c = std::make_shared<CompiledGraph>();
  if (passes && forced) {
    HR_ASSIGN_OR_RETURN(c->graph, graph_passes(g, *forced));
  } else if (passes) {
    HR_ASSIGN_OR_RETURN(c->graph, graph_passes(g, backend_));
  } else {
    c->graph = g;
  }
  HR_ASSIGN_OR_RETURN(ArenaPlan p, arena_plan(c->graph, backend_));
  c->plan = std::make_shared<const ArenaPlan>(std::move(p));
  c->weights = weight_uses(c->graph, *c->plan, residency_options_.clock);
  for (const WeightUse& u : c->weights) c->weight_bytes += u.bytes;
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto [it, inserted] = plans_.emplace(key, PlanEntry{std::move(c), 0});
  if (inserted)
    ++plans_computed_;
  else
    ++plans_cached_;
  it->second.used = ++plan_tick_;
  std::shared_ptr<const CompiledGraph> out = it->second.compiled;
  plans_trim();
  return out;
}

namespace {

std::string node_context(const Graph& g, size_t i) {
  const Node& n = g.nodes()[i];
  std::string in;
  for (size_t k = 0; k < n.inputs.size(); ++k)
    in += (k ? ", " : "") + g.desc(n.inputs[k]).str();
  return fmt::format("node {} '{}' ({}) with inputs ({})", i, n.name, op_name(n.kind), in);
}

std::string input_names(const Graph& g) {
  std::string s;
  for (const Value& v : g.values())
    if (v.kind == ValueKind::INPUT) s += (s.empty() ? "'" : ", '") + v.name + "'";
  return s.empty() ? "none" : s;
}

// Host tensors for each INPUT value, or INVALID_ARGUMENT naming the input.
Result<std::vector<const HostTensor*>> inputs_bind(const Graph& g, const HostInputs& inputs) {
  std::vector<const HostTensor*> bound(g.values().size(), nullptr);
  for (const auto& [name, t] : inputs) {
    ValueId v = g.find_input(name);
    if (v == kNoValue)
      return make_error(ErrorCode::INVALID_ARGUMENT, "'{}' is not an input of the graph (inputs: {})",
                        name, input_names(g));
    if (!t || (t->empty() && t->bytes() > 0))
      return make_error(ErrorCode::INVALID_ARGUMENT, "input '{}' is bound to no tensor", name);
    if (t->desc() != g.desc(v))
      return make_error(ErrorCode::INVALID_ARGUMENT, "input '{}' is {} but the graph expects {}",
                        name, t->desc().str(), g.desc(v).str());
    if (bound[size_t(v)])
      return make_error(ErrorCode::INVALID_ARGUMENT, "input '{}' is bound twice", name);
    bound[size_t(v)] = t;
  }
  for (size_t v = 0; v < g.values().size(); ++v) {
    const Value& x = g.values()[v];
    if (x.kind == ValueKind::INPUT && !bound[v])
      return make_error(ErrorCode::INVALID_ARGUMENT, "input '{}' ({}) is not bound", x.name,
                        x.desc.str());
  }
  return bound;
}

}  // namespace

// Note [streamed execution]
// When a graph's weights do not fit the room the budget leaves (weights_room), the residency
// plan (Note [residency plan] in residency.cpp) keeps some resident and streams the rest through
// a staging ring (Pool::STAGING) on a copy stream of its own:
//  - at the start the compute stream records `start` and the copy stream waits for it, so no
//    copy of this run overwrites ring bytes that the previous run may still read;
//  - a weight's copy is issued right after the node named by copy_after (the last reader of the
//    earlier weights whose bytes it overwrites) and waits for that node's `freed` event; it then
//    records its group's `copied` event (Note [coalesced copies]), and the weight's first reader
//    waits for it. CUDA events refer to their latest record when a wait is issued, and every
//    wait here is issued after the record it needs and before the next one (once per run), so
//    one event per node and one per copy group suffice;
//  - at the end the compute stream waits for `copies_done` (the copy stream's last record), which
//    also joins the copy stream back when the run is captured: a streamed step replays as one
//    CUDA graph, copies and their event edges included (the ring and the pinned host copies
//    keep their addresses).
// The copy stream runs as far ahead of compute as the ring allows; when copies are slower than
// compute the step takes streamed bytes / bandwidth, which is the floor.

struct Executor::RunState {
  std::shared_ptr<const CompiledGraph> compiled;
  const Graph& g;
  const ArenaPlan& plan;
  const std::vector<WeightUse>& uses;
  const ResidencyPlan& res;
  std::vector<const HostTensor*> bound;  // INPUT values' host tensors, by ValueId
  char* base = nullptr;                  // the arena
  char* ring = nullptr;
  Stream* stream = nullptr;
  std::vector<void*> ptr;          // device pointer of each weight storage value, by ValueId
  std::vector<const void*> host;   // per weight use: host source when streamed
  std::vector<std::vector<size_t>> first_at, last_at;  // per node: streamed uses
  std::vector<ValueId> inputs;  // INPUT values, copied before the first node
  size_t next_copy = 0;            // streamed uses in first-use order: next to issue
  std::vector<size_t> copy_order;
  // Note [coalesced copies]: per weight use, its copy's group (in issue order; group g records
  // copied_[g]); the latest node the copy stream and group the compute stream waited for.
  std::vector<int64_t> copy_group;
  int64_t groups = 0, compute_waited = -1;
  int32_t copy_waited = -1;
  const std::vector<std::pair<void*, size_t>>* staging = nullptr;  // Note [captured steps]
  std::vector<Event*> marks;       // Note [node timing]: marks[i + 1] follows node i
  std::vector<Event*> copy_marks;  // Note [streaming timeline]: one per copy group, timed runs
  std::vector<Executor::StreamTimeline::Group> groups_issued;

  RunState(std::shared_ptr<const CompiledGraph> c, const ResidencyPlan& r)
      : compiled(std::move(c)), g(compiled->graph), plan(*compiled->plan),
        uses(compiled->weights), res(r) {}
  void* value_ptr(ValueId v) const {
    const ValueId s = g.storage_of(v);
    const ValueSlot& slot = plan.values[size_t(s)];
    return slot.offset >= 0 ? static_cast<void*>(base + slot.offset) : ptr[size_t(s)];
  }
  // What a capture depends on besides the arena: every weight's device and host address.
  std::vector<const void*> signature() const {
    std::vector<const void*> sig;
    for (size_t k = 0; k < uses.size(); ++k) {
      sig.push_back(ptr[size_t(uses[k].value)]);
      sig.push_back(host.empty() ? nullptr : host[k]);
    }
    return sig;
  }
};

uint64_t Executor::weights_room(const CompiledGraph& c, const WeightSource& w) {
  const uint64_t budget = allocator_.budget();
  uint64_t room = UINT64_MAX;
  if (budget != Allocator::kUnlimited) {
    const uint64_t others = others_held(w.holder(), w.resident_bytes());
    room = budget > others ? budget - others : 0;
    room -= std::min(room, c.plan->arena_bytes);
  }
  room = std::min(room, weights_limit_);  // Note [OOM recovery]
  const uint64_t cap = allocator_.weights_cap();
  if (cap != UINT64_MAX) {
    uint64_t largest = 0;
    for (const WeightUse& u : c.weights) largest = std::max(largest, u.bytes);
    room = std::min(room, cap + std::max<uint64_t>(2, residency_options_.depth) * largest);
  }
  return room;
}

Result<uint64_t> Executor::min_device_bytes(const Graph& g) {
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, compile(g));
  return c->plan->arena_bytes + residency_min_room(c->weights, residency_options_);
}

std::string Executor::last_residency_text() const {
  return residency_describe(residency_, residency_uses_);
}

// Note [residency cache]
// residency_plan is a function of the graph's weight uses (fixed per compiled graph), the room
// and the options, and planning on the clock (Note [spreading copies]) costs ~20-30 ms of CPU
// for SDXL's 1680 weights (by reuse ~0.5 ms): made on every run, it was host time in every
// step, hidden from timed runs (they measure GPU events) but not from a sampler's wall clock.
// Plans are therefore kept per (compiled graph, room), the last few; new options clear them.
Result<ResidencyPlan> Executor::residency_decide(const std::shared_ptr<const CompiledGraph>& cp,
                                                 WeightSource& w) {
  const CompiledGraph& c = *cp;
  const uint64_t room = weights_room(c, w);
  for (const CachedResidency& e : residency_cache_)
    if (e.room == room && e.compiled.lock() == cp) return e.plan;
  const auto t0 = std::chrono::steady_clock::now();
  Result<ResidencyPlan> made = residency_plan_for(c, room);
  if (!made.ok()) return made;
  residency_plan_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++residency_plans_made_;
  constexpr size_t kKept = 8;
  if (residency_cache_.size() >= kKept) residency_cache_.erase(residency_cache_.begin());
  residency_cache_.push_back(CachedResidency{cp, room, *made});
  return made;
}

Result<ResidencyPlan> Executor::residency_plan_for(const CompiledGraph& c, uint64_t room) {
  if (room >= c.weight_bytes) {
    ResidencyPlan all;
    all.offset.assign(c.weights.size(), -1);
    all.copy_after.assign(c.weights.size(), -1);
    all.resident_bytes = c.weight_bytes;
    all.room = room;
    return all;
  }
  Result<ResidencyPlan> r = residency_plan(c.weights, room, residency_options_);
  if (!r.ok()) {
    Status s = r.status().with_context(fmt::format(
        "graph arena {} and {} of weights within a {} budget",
        bytes_format(c.plan->arena_bytes), bytes_format(c.weight_bytes),
        bytes_format(allocator_.budget())));
    s.set_segments(allocator_.segments(c.plan->arena_bytes + residency_min_room(c.weights, residency_options_)));
    return s;
  }
  return r;
}

Status Executor::streams_prepare(size_t weights, size_t nodes) {
  auto make = [&] { return backend_.event_create(); };
  if (!copy_stream_) {
    HR_ASSIGN_OR_RETURN(copy_stream_, backend_.stream_create());
    HR_ASSIGN_OR_RETURN(start_event_, make());
    HR_ASSIGN_OR_RETURN(copies_done_, make());
  }
  for (auto v : {std::pair{&copied_, weights}, std::pair{&freed_, nodes}})
    while (v.first->size() < v.second) {
      HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, make());
      v.first->push_back(std::move(e));
    }
  return Status();
}

// Frees what the plan does not keep, then allocates the arena and the ring: the streamed
// weights' device copies go first so that their room is there for the rest.
Status Executor::buffers_prepare(RunState& r, WeightSource& w) {
  const uint64_t cached = allocator_.stats(Pool::WEIGHTS).cached;
  for (size_t k = 0; k < r.uses.size(); ++k)
    if (r.res.streamed(k)) {
      const Value& v = r.g.values()[size_t(r.uses[k].value)];
      w.weight_evict(v.name, v.layout);
    }
  // Note [weight block cache]: the blocks of weights this plan streams from now on are not wanted
  // back soon, and idle blocks held beside the plan's own bytes would lift the peak above the
  // plan's; they go back to the device now.
  if (allocator_.stats(Pool::WEIGHTS).cached > cached) allocator_.cache_release(UINT64_MAX);
  // The ring is exactly the plan's: a larger one left by another graph would eat the room the
  // plan counted on.
  const uint64_t ring_bytes = r.res.streams() ? align_up(r.res.ring_bytes) : 0;
  if (ring_.size() != ring_bytes) ring_.reset();
  if (r.plan.arena_bytes > 0 && arena_.size() < r.plan.arena_bytes) {
    arena_.reset();  // free first: the old and the new arena never count together
    HR_ASSIGN_OR_RETURN(arena_, allocator_.allocate(r.plan.arena_bytes, Pool::ACTIVATIONS,
                                                    "graph arena"));
    ++buffers_gen_;
  }
  if (r.res.streams() && !ring_) {
    HR_ASSIGN_OR_RETURN(ring_, allocator_.allocate(r.res.ring_bytes, Pool::STAGING,
                                                   "weight staging ring"));
    ++buffers_gen_;
  }
  if (r.res.streams()) HR_TRY(streams_prepare(r.uses.size(), r.g.nodes().size()));
  r.base = static_cast<char*>(arena_.data());
  r.ring = static_cast<char*>(ring_.data());
  return Status();
}

// Every weight's address before the first node: resident copies from the source (uploaded on
// first use, in first-use order), streamed ones at their ring offset with their host source.
Status Executor::weights_bind(RunState& r, WeightSource& w) {
  r.ptr.assign(r.g.values().size(), nullptr);
  r.host.assign(r.res.streams() ? r.uses.size() : 0, nullptr);
  // Host copies of the streamed weights, asked for together in streaming order (Note
  // [coalesced copies]).
  std::vector<WeightRequest> requests;
  for (size_t k : r.copy_order) {
    const Value& v = r.g.values()[size_t(r.uses[k].value)];
    requests.push_back(WeightRequest{v.name, v.desc, v.layout});
  }
  std::vector<TensorRef> hosts;
  if (!requests.empty()) {
    Result<std::vector<TensorRef>> got = w.weight_host_all(requests, kDeviceAlignment);
    if (!got.ok())
      return got.status().with_context(node_context(r.g, size_t(r.uses[r.copy_order[0]].first)));
    hosts = std::move(*got);
  }
  std::vector<size_t> host_index(r.uses.size(), 0);
  for (size_t j = 0; j < r.copy_order.size(); ++j) host_index[r.copy_order[j]] = j;
  for (size_t k = 0; k < r.uses.size(); ++k) {
    const WeightUse& u = r.uses[k];
    const Value& v = r.g.values()[size_t(u.value)];
    const bool streamed = r.res.streamed(k);
    Result<TensorRef> got = streamed ? Result<TensorRef>(hosts.at(host_index[k]))
                                     : w.weight_get(v.name, v.desc, v.layout);
    if (!got.ok()) return got.status().with_context(node_context(r.g, size_t(u.first)));
    const TensorRef ref = *got;
    if (ref.desc != v.desc)
      return make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is {} but the graph expects {}",
                        v.name, ref.desc.str(), v.desc.str())
          .with_context(node_context(r.g, size_t(u.first)));
    if (!ref.data && v.desc.bytes() > 0)
      return make_error(ErrorCode::INTERNAL, "weight '{}' was served without memory", v.name);
    if (streamed) {
      r.host[k] = ref.data;
      r.ptr[size_t(u.value)] = r.ring + r.res.offset[k];
    } else {
      r.ptr[size_t(u.value)] = ref.data;
    }
  }
  for (ValueId o : r.g.outputs()) {  // a weight marked as an output that no node reads
    const ValueId s = r.g.storage_of(o);
    if (r.plan.values[size_t(s)].offset >= 0 || r.ptr[size_t(s)]) continue;
    const Value& v = r.g.values()[size_t(s)];
    HR_ASSIGN_OR_RETURN(TensorRef ref, w.weight_get(v.name, v.desc, v.layout));
    r.ptr[size_t(s)] = ref.data;
  }
  return Status();
}

// Note [inputs before the ring]
// A streamed run's first copies fill the whole ring (every weight whose ring bytes no earlier
// weight of the run uses may start at once), tens to hundreds of MiB. Host-to-device copies of
// one direction share the copy engine, so an input copied on the compute stream after them (the
// latent before the first convolution, the text context before the first cross-attention)
// waited for all of them: on the H200 the first tenth of a streamed SD1.5 step took 1.4-3.5 ms
// longer than resident, and SDXL's latent copy 2.7-4.1 ms (Note [streaming timeline]). Inputs
// therefore live from the first node (Note [inputs in the arena] in planner.cpp) and are all
// copied before the ring's first copies are issued.

// Note [coalesced copies]
// Streamed weights lie one after the other in the ring (Note [residency plan]) and, since the
// weight source lays out their page-locked host copies in the same order and padding
// (WeightSource::weight_host_all), one after the other in host memory too. Each transfer costs
// ~10 us beyond its bytes on the H200 (an SD1.5 step streams 686 tensors, many of a few KiB), so
// the copies that may start after the same node and are neighbours on both sides go as one
// transfer of up to ResidencyOptions::group_bytes, with one event; a copy never waits for a
// later node than its own. The compute stream waits for a group once (the copy stream is in
// order, so a wait for a later group covers the earlier ones), and the copy stream waits for a
// node's `freed` event only when no later one was waited for already.
//
// Issues the copies whose ring bytes are free once node `after_node` has run (-1: at the start).
Status Executor::copies_issue(RunState& r, int32_t after_node) {
  while (r.next_copy < r.copy_order.size()) {
    const size_t k = r.copy_order[r.next_copy];
    if (r.res.copy_after[k] > after_node) break;
    // The group: k and the permitted neighbours that follow it in both the ring and host memory.
    size_t end = r.next_copy + 1;
    uint64_t bytes = r.uses[k].bytes;
    int32_t after = r.res.copy_after[k];
    for (; end < r.copy_order.size(); ++end) {
      const size_t prev = r.copy_order[end - 1], m = r.copy_order[end];
      const uint64_t step = r.uses[prev].bytes;
      if (r.res.copy_after[m] > after_node || bytes + r.uses[m].bytes > residency_options_.group_bytes ||
          r.res.offset[m] != r.res.offset[prev] + int64_t(step) ||
          static_cast<const char*>(r.host[m]) != static_cast<const char*>(r.host[prev]) + step)
        break;
      bytes += r.uses[m].bytes;
      after = std::max(after, r.res.copy_after[m]);
    }
    if (after > r.copy_waited) {
      HR_TRY(backend_.stream_wait_event(copy_stream_.get(), freed_[size_t(after)].get()));
      r.copy_waited = after;
    }
    const size_t last = r.copy_order[end - 1];
    const Value& lv = r.g.values()[size_t(r.uses[last].value)];
    const size_t n = size_t(r.res.offset[last] - r.res.offset[k]) + lv.desc.bytes();
    const Value& v = r.g.values()[size_t(r.uses[k].value)];
    HR_TRY(backend_.copy_h2d(r.ptr[size_t(r.uses[k].value)], r.host[k], n, copy_stream_.get())
               .with_context(end - r.next_copy == 1
                                 ? fmt::format("streaming weight '{}'", v.name)
                                 : fmt::format("streaming weights '{}' .. '{}'", v.name, lv.name)));
    HR_TRY(backend_.event_record(copied_[size_t(r.groups)].get(), copy_stream_.get()));
    if (size_t(r.groups) < r.copy_marks.size()) {  // Note [streaming timeline]
      HR_TRY(backend_.event_record(r.copy_marks[size_t(r.groups)], copy_stream_.get()));
      r.groups_issued.push_back({0, bytes, after, r.uses[k].first});
    }
    for (size_t j = r.next_copy; j < end; ++j) {
      const size_t m = r.copy_order[j];
      r.copy_group[m] = int64_t(r.groups);
      streamed_total_ += r.uses[m].bytes;  // as a replay counts them (ResidencyPlan::streamed_bytes)
    }
    ++r.groups;
    r.next_copy = end;
  }
  return Status();
}

Status Executor::ops_issue(RunState& r) {
  const std::vector<Node>& nodes = r.g.nodes();
  const std::vector<Value>& vals = r.g.values();
  Stream* stream = r.stream;
  auto input_from = [&](ValueId v) -> Status {
    const void* p = r.staging ? (*r.staging)[size_t(v)].first : r.bound[size_t(v)]->data();
    const size_t n = r.staging ? (*r.staging)[size_t(v)].second : r.bound[size_t(v)]->bytes();
    if (n == 0) return Status();
    return backend_.copy_h2d(r.base + r.plan.values[size_t(v)].offset, p, n, stream)
        .with_context(fmt::format("copying input '{}'", vals[size_t(v)].name));
  };
  const bool streams = r.res.streams();
  r.next_copy = 0;
  r.groups = 0;
  r.copy_waited = -1;
  r.compute_waited = -1;
  r.copy_group.assign(r.uses.size(), -1);
  // The inputs go before the ring's first copies (Note [inputs before the ring]).
  for (ValueId v : r.inputs) HR_TRY(input_from(v));
  if (streams) {
    HR_TRY(backend_.event_record(start_event_.get(), stream));
    HR_TRY(backend_.stream_wait_event(copy_stream_.get(), start_event_.get()));
    HR_TRY(copies_issue(r, -1));
  }
  std::vector<TensorRef> refs;
  if (!r.marks.empty()) HR_TRY(backend_.event_record(r.marks[0], stream));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const NodeSlot& ns = r.plan.nodes[i];
    if (!ns.view) {  // Note [views]: a view's output aliases its input's storage
      if (streams)
        for (size_t k : r.first_at[i])
          if (r.copy_group[k] > r.compute_waited) {  // Note [coalesced copies]
            HR_TRY(backend_.stream_wait_event(stream, copied_[size_t(r.copy_group[k])].get()));
            r.compute_waited = r.copy_group[k];
          }
      refs.clear();
      for (ValueId x : n.inputs) refs.push_back(TensorRef{r.g.desc(x), r.value_ptr(x)});
      OpCall call;
      call.kind = n.kind;
      call.params = &n.params;
      call.inputs = refs;
      call.output = TensorRef{r.g.desc(n.output), r.value_ptr(n.output)};
      if (ns.workspace_bytes > 0) {
        call.workspace = r.base + ns.workspace_offset;
        call.workspace_bytes = ns.workspace_bytes;
      }
      Status st = backend_.op_run(call, stream);
      if (!st.ok()) return st.with_context(node_context(r.g, i));
    }
    if (!r.marks.empty()) HR_TRY(backend_.event_record(r.marks[i + 1], stream));
    if (streams && !r.last_at[i].empty()) {
      HR_TRY(backend_.event_record(freed_[i].get(), stream));
      HR_TRY(copies_issue(r, int32_t(i)));
    }
  }
  if (streams) {
    HR_TRY(backend_.event_record(copies_done_.get(), copy_stream_.get()));
    HR_TRY(backend_.stream_wait_event(stream, copies_done_.get()));
  }
  return Status();
}

Result<std::vector<HostTensor>> Executor::outputs_collect(RunState& r) {
  std::vector<HostTensor> out;
  for (ValueId o : r.g.outputs()) {
    HostTensor h(r.g.desc(o));
    if (h.bytes() > 0)
      HR_TRY(backend_.copy_d2h(h.data(), r.value_ptr(o), h.bytes(), r.stream)
                 .with_context(fmt::format("copying output '{}'", r.g.values()[size_t(o)].name)));
    out.push_back(std::move(h));
  }
  HR_TRY(backend_.stream_sync(r.stream));
  return out;
}

// Note [node timing]
Result<std::vector<HostTensor>> Executor::run_timed(RunState& r) {
  const size_t n = r.g.nodes().size();
  auto it = captures_.find(r.compiled.get());
  // Three captured replays first, so that the GPU is busy while the host issues the timed step.
  if (it != captures_.end() && it->second.work && capture_current(it->second, r, r.signature()))
    for (int k = 0; k < 3; ++k) HR_TRY(backend_.captured_launch(it->second.work.get(), r.stream));
  while (timing_events_.size() < n + 1) {
    HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, backend_.timing_event_create());
    timing_events_.push_back(std::move(e));
  }
  for (size_t i = 0; i <= n; ++i) r.marks.push_back(timing_events_[i].get());
  HR_TRY(copy_marks_prepare(r));
  r.staging = nullptr;
  HR_TRY(ops_issue(r));
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> out, outputs_collect(r));
  node_ms_.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    HR_ASSIGN_OR_RETURN(node_ms_[i], backend_.event_elapsed_ms(r.marks[i], r.marks[i + 1]));
  }
  HR_TRY(timeline_collect(r));
  r.marks.clear();
  return out;
}

// Note [streaming timeline]
// bench_streaming's floor ratio says how far a streamed step is from max(compute, copies), not
// why. A timed run (Note [node timing]) that streams also records a timing event on the copy
// stream after every copy group; elapsed times from the run's first mark give each node's and
// each group's end on one clock. A node that ends later than the resident run's node did waited
// for a copy; a group that ends long after the previous one while its `after` node ended early
// says the copy stream idled (nothing was permitted), one whose `after` node ended late says the
// ring held it back.
Status Executor::copy_marks_prepare(RunState& r) {
  timeline_ = StreamTimeline();
  if (!r.res.streams()) return Status();
  while (copy_timing_events_.size() < r.copy_order.size()) {
    HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, backend_.timing_event_create());
    copy_timing_events_.push_back(std::move(e));
  }
  for (size_t g = 0; g < r.copy_order.size(); ++g) r.copy_marks.push_back(copy_timing_events_[g].get());
  return Status();
}

Status Executor::timeline_collect(RunState& r) {
  if (r.copy_marks.empty() || r.marks.empty()) return Status();
  double at = 0;  // the nodes' ends: node_ms_ (marks[i] to marks[i + 1]) summed
  for (double ms : node_ms_) timeline_.node_end_ms.push_back(at += ms);
  for (const Node& n : r.g.nodes()) timeline_.node_names.push_back(n.name);
  timeline_.groups = r.groups_issued;
  for (size_t g = 0; g < timeline_.groups.size(); ++g) {
    HR_ASSIGN_OR_RETURN(timeline_.groups[g].end_ms,
                        backend_.event_elapsed_ms(r.marks[0], r.copy_marks[g]));
  }
  r.copy_marks.clear();
  return Status();
}

// HEADROOM_DEBUG_CAPTURE=1 traces capture decisions on stderr (for reports of replay crashes).
void Executor::capture_trace(const char* what, const RunState& r) const {
  static const bool on = env_switch("HEADROOM_DEBUG_CAPTURE", false);
  if (!on) return;
  size_t streamed = 0;
  for (const void* h : r.host) streamed += h != nullptr;
  fmt::print(stderr, "capture: plan {} ({} nodes): {}; arena {}, ring {} ({} B), {} streamed\n",
             static_cast<const void*>(r.compiled.get()), r.g.nodes().size(), what,
             static_cast<const void*>(r.base), static_cast<const void*>(r.ring), ring_.size(),
             streamed);
}

// Note [captures and freed memory]
// A recorded kernel holds raw addresses, but a recorded copy holds what the driver resolved
// the addresses to when the graph was instantiated. If the arena, the ring or a page-locked
// source is freed and a new block lands at the same address, comparing addresses says the
// capture is still good, and its replay makes the driver read the freed block's records
// (seen on the H200: a segfault inside cudaGraphLaunch when SDXL's bigG encoder ran again
// after the CLIP-L encoder had freed the ring). So a capture also remembers the generation of
// the executor's buffers and, when it streams, the count of page-locked blocks freed.
bool Executor::capture_current(const Capture& cap, const RunState& r,
                               const std::vector<const void*>& sig) const {
  if (cap.arena != r.base || cap.weights != sig || cap.buffers_gen != buffers_gen_) return false;
  return !r.res.streams() || cap.pinned_frees == allocator_.pinned_account()->frees.load();
}

// Replay or record (Note [captured steps]); UNSUPPORTED sends the caller to a plain run.
Result<std::vector<HostTensor>> Executor::run_captured(RunState& r) {
  Capture& cap = capture_entry(r.compiled);
  if (cap.failed || cap.runs++ < 1) return Status(ErrorCode::UNSUPPORTED, "not captured yet");
  const std::vector<Value>& vals = r.g.values();
  std::vector<const void*> sig = r.signature();
  if (cap.work && !capture_current(cap, r, sig)) {
    capture_trace("bindings changed: captured again", r);
    cap.work.reset();
  }
  if (cap.staging.size() != vals.size()) {
    staging_free(cap.staging);
    cap.staging.assign(vals.size(), {nullptr, 0});
    for (size_t v = 0; v < vals.size(); ++v) {
      if (vals[v].kind != ValueKind::INPUT || vals[v].desc.bytes() == 0) continue;
      void* p = allocator_.pinned_alloc(vals[v].desc.bytes());
      if (!p) {  // over the pinned budget: plain runs (a capture needs page-locked inputs)
        staging_free(cap.staging);
        cap.failed = true;
        return Status(ErrorCode::UNSUPPORTED, "no page-locked staging for the inputs");
      }
      cap.staging[v] = {p, vals[v].desc.bytes()};
    }
  }
  for (size_t v = 0; v < vals.size(); ++v)
    if (cap.staging[v].second)
      std::memcpy(cap.staging[v].first, r.bound[v]->data(), cap.staging[v].second);
  r.staging = &cap.staging;
  if (!cap.work) {
    // Note [pageable sources]: a weight beyond the pinned budget streams from pageable memory;
    // a recorded copy from it would be replayed by the CPU from wherever that memory has gone.
    for (const void* h : r.host)
      if (h && !backend_.host_pinned(h)) {
        r.staging = nullptr;
        capture_trace("not captured: a streamed weight is in pageable host memory", r);
        return Status(ErrorCode::UNSUPPORTED, "a streamed weight is in pageable host memory");
      }
    HR_TRY(backend_.stream_sync(r.stream));
    if (r.res.streams()) HR_TRY(backend_.stream_sync(copy_stream_.get()));
    if (backend_.capture_begin(r.stream).ok()) {
      Status ran = ops_issue(r);
      Result<std::unique_ptr<CapturedWork>> w = backend_.capture_end(r.stream);
      if (ran.ok() && w.ok()) {
        cap.work = std::move(w).value();
        cap.arena = r.base;
        cap.weights = std::move(sig);
        cap.buffers_gen = buffers_gen_;
        cap.pinned_frees = allocator_.pinned_account()->frees.load();
        capture_trace("captured", r);
      }
    }
    if (!cap.work) {
      cap.failed = true;
      r.staging = nullptr;
      return Status(ErrorCode::UNSUPPORTED, "capture failed");
    }
  }
  capture_trace("replay", r);
  HR_TRY(backend_.captured_launch(cap.work.get(), r.stream));
  if (r.res.streams()) streamed_total_ += r.res.streamed_bytes;
  return outputs_collect(r);
}

Result<std::vector<HostTensor>> Executor::run_body(RunState& r) {
  if (timing_) return run_timed(r);
  if (capture_enabled_ && !r.g.nodes().empty()) {
    Result<std::vector<HostTensor>> out = run_captured(r);
    if (out.ok() || out.status().code() != ErrorCode::UNSUPPORTED) return out;
  }
  r.staging = nullptr;
  HR_TRY(ops_issue(r));
  return outputs_collect(r);
}

Result<std::vector<HostTensor>> Executor::run_attempt(
    const std::shared_ptr<const CompiledGraph>& compiled,
    const std::vector<const HostTensor*>& bound, WeightSource& weights) {
  HR_ASSIGN_OR_RETURN(residency_, residency_decide(compiled, weights));
  residency_uses_ = compiled->weights;
  RunState r(compiled, residency_);
  r.bound = bound;
  r.stream = backend_.default_stream();
  const size_t n = std::max<size_t>(r.g.nodes().size(), 1);
  // Inputs live from the first node and are copied before it (Note [inputs in the arena]).
  for (size_t v = 0; v < r.g.values().size(); ++v)
    if (r.g.values()[v].kind == ValueKind::INPUT) r.inputs.push_back(ValueId(v));
  r.first_at.assign(n, {});
  r.last_at.assign(n, {});
  for (size_t k = 0; k < r.uses.size(); ++k)
    if (residency_.streamed(k)) {
      r.first_at[size_t(r.uses[k].first)].push_back(k);
      r.last_at[size_t(r.uses[k].last)].push_back(k);
      r.copy_order.push_back(k);  // uses are in first-use order already
    }
  HR_TRY(buffers_prepare(r, weights));
  HR_TRY(weights_bind(r, weights));
  Result<std::vector<HostTensor>> out = run_body(r);
  if (!out.ok()) {  // Note [arena reuse]: nothing may still touch the arena or the ring
    (void)backend_.stream_sync(r.stream);
    if (copy_stream_) (void)backend_.stream_sync(copy_stream_.get());
  }
  return out;
}

// Note [OOM recovery]
// A run plans within the room it sees (weights_room), so an allocation fails only when the
// device refused memory the budget allowed (another process took it) or when the source held
// device copies the plan did not count. Then the run frees what it caches (captured steps, its
// ring and arena, all device copies of its weights) and what idle holders cache, and plans
// again with the weights (resident and ring) limited to what the device has free now beside
// the arena, streaming more; then to half of that, and so on four times. Only when every
// attempt fails does the error reach the caller, naming the segments.
Result<std::vector<HostTensor>> Executor::run_recover(
    const std::shared_ptr<const CompiledGraph>& compiled,
    const std::vector<const HostTensor*>& bound, WeightSource& weights, const Status& failed) {
  auto release_all = [&] {
    captures_clear();
    ring_.reset();
    arena_.reset();
    for (const WeightUse& u : compiled->weights) {
      const Value& v = compiled->graph.values()[size_t(u.value)];
      weights.weight_evict(v.name, v.layout);
    }
    allocator_.cache_release(UINT64_MAX);  // the evicted blocks too (Note [weight block cache])
  };
  release_all();
  allocator_.reclaim(UINT64_MAX);
  // What the device reports free is more than small allocations can use (they are carved from
  // 2 MiB pages): each further attempt gives the weights half as much of it.
  Result<std::vector<HostTensor>> out = failed;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (!backend_.host_visible()) {
      const uint64_t free = backend_.info().memory_free, usable = free - free / 20;
      const uint64_t arena = compiled->plan->arena_bytes;
      weights_limit_ = (usable > arena ? usable - arena : 0) >> attempt;
    }
    out = run_attempt(compiled, bound, weights);
    weights_limit_ = UINT64_MAX;
    ++recoveries_;
    if (out.ok() || out.status().code() != ErrorCode::OUT_OF_MEMORY) return out;
    release_all();
  }
  return out.status().with_context(
      fmt::format("after an allocation failed ({}) and the run was planned again",
                  failed.message()));
}

Result<std::vector<HostTensor>> Executor::run(const Graph& graph, const HostInputs& inputs,
                                              WeightSource& weights) {
  RunRecord record;
  Result<std::vector<HostTensor>> out = run_locked(graph, inputs, weights, record);
  if (out.ok() && run_observer_) {
    record.resident_bytes = weights.resident_bytes();  // after run_end's trim
    run_observer_(record);
  }
  return out;
}

Result<std::vector<HostTensor>> Executor::run_locked(const Graph& graph, const HostInputs& inputs,
                                                     WeightSource& weights, RunRecord& record) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  running_ = true;
  weights.run_begin();
  struct RunEnd {
    Executor& ex;
    WeightSource& w;
    ~RunEnd() {
      ex.last_use_ = ex.allocator_.tick();
      ex.running_ = false;
      w.run_end();
    }
  } run_end{*this, weights};
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> compiled, compile(graph));
  HR_ASSIGN_OR_RETURN(std::vector<const HostTensor*> bound, inputs_bind(compiled->graph, inputs));
  Result<std::vector<HostTensor>> out = run_attempt(compiled, bound, weights);
  if (!out.ok() && out.status().code() == ErrorCode::OUT_OF_MEMORY)
    out = run_recover(compiled, bound, weights, out.status());
  if (!out.ok() || !run_observer_) return out;  // the record is for an observer only
  record.weights = &weights;
  record.weight_bytes = compiled->weight_bytes;
  record.arena_bytes = compiled->plan->arena_bytes;
  record.workspace_bytes = compiled->plan->workspace_peak;
  if (residency_.streams()) {
    record.streamed_bytes = residency_.streamed_bytes;
    record.ring_bytes = residency_.ring_bytes;
    record.residency = last_residency_text();
  }
  return out;
}

}  // namespace hr
