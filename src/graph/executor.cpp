// The executor's construction, settings, and its accounts of room: what the allocator leaves a
// run for its arena and for its weights, and the residency policy's plan within that room.
#include "graph/executor.h"

#include <algorithm>
#include <cassert>

#include "core/alignment.h"
#include "core/env.h"
#include "graph/passes.h"
#include "core/bytes.h"
#include "core/env.h"

namespace hr {

Executor::Executor(Backend& backend, Allocator& allocator, ExecutorPolicies policies)
    : backend_(backend), allocator_(allocator), policies_(std::move(policies)),
      captures_(backend, allocator), copies_(backend) {
  assert(policies_.residency && policies_.recovery);
  captures_.set_enabled(env_switch("HEADROOM_CUDA_GRAPHS", true));
  CompileSettings settings;
  settings.passes = env_switch("HEADROOM_GRAPH_PASSES", true);
  plans_.set_settings(settings);
  allocator_.reclaimable_add(this);
  // The copy stream and its fixed events exist before they are needed: the moment a run first
  // streams may be the moment the device has no memory left for them (Note [OOM recovery]).
  if (!backend_.memory_is_host()) (void)copies_.prepare(0, 0);
}

Executor::~Executor() {
  if (allocator_alive_) allocator_.reclaimable_remove(this);
  captures_.clear();
}

void Executor::set_passes(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  captures_.clear();
  CompileSettings settings = plans_.settings();
  settings.passes = on;
  plans_.set_settings(settings);
}

void Executor::set_pass_options(std::optional<PassOptions> options) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  captures_.clear();
  CompileSettings settings = plans_.settings();
  settings.forced = options;
  plans_.set_settings(settings);
}

void Executor::set_capture(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  captures_.set_enabled(on);
}

void Executor::set_node_timing(bool on) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  timing_.on = on;
  timing_.node_ms.clear();
}

void Executor::set_cache_limits(const CacheLimits& limits) {
  captures_.set_limit(limits.captures);
  plans_.set_limit(limits.plans);
}

void Executor::allocator_gone() {
  std::lock_guard<std::mutex> lock(run_mu_);
  captures_.clear();
  buffers_.arena.reset();
  buffers_.ring.reset();
  allocator_alive_ = false;
}

uint64_t Executor::reclaim(uint64_t bytes) {
  if (running_) return 0;
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  const uint64_t freed = buffers_.arena.size() + buffers_.ring.size();
  buffers_.arena.reset();
  buffers_.ring.reset();
  return freed;
}

void Executor::release_arena() {
  std::lock_guard<std::mutex> lock(run_mu_);
  buffers_.arena.reset();
  buffers_.ring.reset();
}

uint64_t Executor::others_held(const Reclaimable* keep, uint64_t also_mine) {
  const uint64_t held = allocator_.total().current;
  const uint64_t mine = buffers_.arena.size() + buffers_.ring.size() + also_mine;
  return held - std::min(held, mine + allocator_.reclaimable_bytes(keep, this));
}

uint64_t Executor::arena_room(const Reclaimable* keep) {
  const uint64_t budget = allocator_.budget();
  if (budget == Allocator::kUnlimited) return UINT64_MAX;
  const uint64_t others = others_held(keep, 0);
  return budget > others ? budget - others : 0;
}

// A plan null: every weight as streamed and as resident, the most any plan needs.
uint64_t Executor::patch_room(const CompiledGraph& c, const WeightSource& w,
                              const ResidencyPlan* plan) {
  if (!w.patches_any()) return 0;
  std::vector<WeightRequest> streamed, resident;
  for (size_t k = 0; k < c.weights.size(); ++k) {
    const Value& v = c.graph.values()[size_t(c.weights[k].value)];
    const bool streams = plan && plan->streamed(k);
    if (!plan || streams) streamed.push_back(WeightRequest{v.name, v.desc, v.layout});
    if (!streams) resident.push_back(WeightRequest{v.name, v.desc, v.layout});
  }
  return w.patch_room_bytes(streamed, resident);
}

uint64_t Executor::weights_room(const CompiledGraph& c, const WeightSource& w) {
  const uint64_t budget = allocator_.budget();
  uint64_t room = UINT64_MAX;
  if (budget != Allocator::kUnlimited) {
    const uint64_t others = others_held(w.holder(), w.resident_bytes());
    room = budget > others ? budget - others : 0;
    room -= std::min(room, c.plan->arena_bytes);
  }
  room = std::min(room, recovery_.weights_limit);  // Note [OOM recovery]
  const uint64_t cap = allocator_.weights_cap();
  if (cap != UINT64_MAX) {
    uint64_t largest = 0;
    for (const WeightUse& u : c.weights) largest = std::max(largest, u.bytes);
    room = std::min(room, cap + std::max<uint64_t>(2, residency_options().depth) * largest);
  }
  return room;
}

Result<uint64_t> Executor::min_device_bytes(const Graph& g) {
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, compile(g));
  return c->plan->arena_bytes + policies_.residency->min_room(*c);
}

std::string Executor::last_residency_text() const {
  return residency_describe(residency_.plan, residency_.uses);
}

// Note [patched streaming room]
// A streamed patched weight needs its factors on the device beside the ring; a resident one is
// patched once, in the run that first uses it, and needs its factors, scratch and workspace only
// then (Note [resident patch room] in memory/patched_weights.cpp). So the room the weights get is
// the room less what patching needs under the plan, which depends on the plan. Reserving the
// factors of every weight (the first form) cost SDXL with a rank-64 LoRA 650 MiB of resident
// weights at 50 % resident, streamed again every step. So the plan is found by raising the
// reserve to what the previous plan needs until a plan needs no more than its reserve; after a
// few rounds the reserve for every weight is taken. Leaving the resident weights' patching out
// (a form that reserved nothing for a plan that streams nothing) ran a tiny UNet with a LoRA
// stack out of memory on the H200: its patch scratch and cuBLAS workspace were 8 MiB.
Result<ResidencyPlan> Executor::residency_within(const std::shared_ptr<const CompiledGraph>& cp,
                                                 const WeightSource& w, uint64_t room) {
  const CompiledGraph& c = *cp;
  if (!w.patches_any() || room == UINT64_MAX) return policies_.residency->decide(cp, room);
  uint64_t reserve = 0;
  for (int round = 0; round < 4; ++round) {
    Result<ResidencyPlan> p = policies_.residency->decide(cp, room - std::min(room, reserve));
    if (!p.ok()) break;
    const uint64_t need = patch_room(c, w, &*p);
    if (need <= reserve) return p;
    reserve = need + (need - reserve) / 4;  // a little ahead: the next plan streams more
  }
  const uint64_t all = patch_room(c, w, nullptr);
  return policies_.residency->decide(cp, room - std::min(room, all));
}

Result<ResidencyPlan> Executor::residency_decide(const std::shared_ptr<const CompiledGraph>& cp,
                                                 WeightSource& w) {
  const CompiledGraph& c = *cp;
  Result<ResidencyPlan> made = residency_within(cp, w, weights_room(c, w));
  if (made.ok()) return made;
  Status s = made.status().with_context(
      fmt::format("graph arena {} and {} of weights within a {} budget",
                  bytes_format(c.plan->arena_bytes), bytes_format(c.weight_bytes),
                  bytes_format(allocator_.budget())));
  s.set_segments(allocator_.segments(c.plan->arena_bytes + policies_.residency->min_room(c)));
  return s;
}

}  // namespace hr
