// One run: binding inputs and weights, the arena and the ring, issuing the ops in order on the
// compute stream (with a streamed run's copies), collecting the outputs, and the plain strategy;
// a run that fails for memory goes to the recovery policy.
#include "core/alignment.h"
#include "graph/executor.h"

#include <algorithm>

namespace hr {

// Note [arena reuse]
// run() keeps its arena between runs and reallocates only when a plan needs more. All work of
// a run (input copies, kernels, output copies) is ordered on the backend's default stream and
// run() ends with stream_sync, so when the next run (or release_arena) touches the arena no
// earlier work can still be reading or writing it (Note [stream-ordered reuse] in STYLE.md:
// the arena belongs to the default stream only). On an error run() also syncs before returning.

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
  RunBuffers& b = buffers_;
  if (b.ring.size() != ring_bytes) b.ring.reset();
  if (r.plan.arena_bytes > 0 && b.arena.size() < r.plan.arena_bytes) {
    b.arena.reset();  // free first: the old and the new arena never count together
    HR_ASSIGN_OR_RETURN(b.arena, allocator_.allocate(r.plan.arena_bytes, Pool::ACTIVATIONS,
                                                     "graph arena"));
    ++b.gen;
  }
  if (r.res.streams() && !b.ring) {
    HR_ASSIGN_OR_RETURN(b.ring, allocator_.allocate(r.res.ring_bytes, Pool::STAGING,
                                                    "weight staging ring"));
    ++b.gen;
  }
  if (r.res.streams()) HR_TRY(copies_.prepare(r.uses.size(), r.g.nodes().size()));
  r.at.base = static_cast<char*>(b.arena.data());
  r.at.ring = static_cast<char*>(b.ring.data());
  return Status();
}

// Every weight's address before the first node: resident copies from the source (uploaded on
// first use, in first-use order), streamed ones at their ring offset with their host source.
Status Executor::weights_bind(RunState& r, WeightSource& w) {
  RunBindings& at = r.at;
  at.ptr.assign(r.g.values().size(), nullptr);
  at.host.assign(r.res.streams() ? r.uses.size() : 0, nullptr);
  at.patched.assign(r.uses.size(), 0);
  at.source = &w;
  // Host copies of the streamed weights, asked for together in streaming order (Note
  // [coalesced copies]).
  std::vector<WeightRequest> requests;
  for (size_t k : r.copies.order) {
    const Value& v = r.g.values()[size_t(r.uses[k].value)];
    requests.push_back(WeightRequest{v.name, v.desc, v.layout});
  }
  std::vector<TensorRef> hosts;
  if (!requests.empty()) {
    Result<std::vector<TensorRef>> got = w.weight_host_all(requests, kDeviceAlignment);
    if (!got.ok())
      return got.status().with_context(
          node_context(r.g, size_t(r.uses[r.copies.order[0]].first)));
    hosts = std::move(*got);
  }
  std::vector<size_t> host_index(r.uses.size(), 0);
  for (size_t j = 0; j < r.copies.order.size(); ++j) host_index[r.copies.order[j]] = j;
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
      at.host[k] = ref.data;
      at.ptr[size_t(u.value)] = at.ring + r.res.offset[k];
      at.patched[k] = w.weight_patched(v.name, v.layout);  // Note [patched streaming]
    } else {
      at.ptr[size_t(u.value)] = ref.data;
    }
  }
  for (ValueId o : r.g.outputs()) {  // a weight marked as an output that no node reads
    const ValueId s = r.g.storage_of(o);
    if (r.plan.values[size_t(s)].offset >= 0 || at.ptr[size_t(s)]) continue;
    const Value& v = r.g.values()[size_t(s)];
    HR_ASSIGN_OR_RETURN(TensorRef ref, w.weight_get(v.name, v.desc, v.layout));
    at.ptr[size_t(s)] = ref.data;
  }
  return Status();
}

Status Executor::ops_issue(RunState& r) {
  const std::vector<Node>& nodes = r.g.nodes();
  const std::vector<Value>& vals = r.g.values();
  const RunBindings& at = r.at;
  Stream* stream = at.stream;
  auto input_from = [&](ValueId v) -> Status {
    const void* p = at.staging ? (*at.staging)[size_t(v)].first : at.bound[size_t(v)]->data();
    const size_t n = at.staging ? (*at.staging)[size_t(v)].second : at.bound[size_t(v)]->bytes();
    if (n == 0) return Status();
    return backend_.copy_h2d(at.base + r.plan.values[size_t(v)].offset, p, n, stream)
        .with_context(fmt::format("copying input '{}'", vals[size_t(v)].name));
  };
  const bool streams = r.res.streams();
  const uint64_t group_bytes = residency_options().group_bytes;
  r.copies.cursor_reset(r.uses.size());
  // The inputs go before the ring's first copies (Note [inputs before the ring]).
  for (ValueId v : at.inputs) HR_TRY(input_from(v));
  if (streams) HR_TRY(copies_.begin(r, group_bytes));
  std::vector<TensorRef> refs;
  const std::vector<Event*>& marks = r.marks.nodes;
  if (!marks.empty()) HR_TRY(backend_.event_record(marks[0], stream));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const NodeSlot& ns = r.plan.nodes[i];
    if (!ns.view) {  // Note [views]: a view's output aliases its input's storage
      if (streams) HR_TRY(copies_.before_node(r, i));
      refs.clear();
      for (ValueId x : n.inputs) refs.push_back(TensorRef{r.g.desc(x), r.value_ptr(x)});
      OpCall call;
      call.kind = n.kind;
      call.params = &n.params;
      call.inputs = refs;
      call.output = TensorRef{r.g.desc(n.output), r.value_ptr(n.output)};
      if (ns.workspace_bytes > 0) {
        call.workspace = at.base + ns.workspace_offset;
        call.workspace_bytes = ns.workspace_bytes;
      }
      Status st = backend_.op_run(call, stream);
      if (!st.ok()) return st.with_context(node_context(r.g, i));
    }
    if (!marks.empty()) HR_TRY(backend_.event_record(marks[i + 1], stream));
    if (streams) HR_TRY(copies_.after_node(r, i, group_bytes));
  }
  if (streams) HR_TRY(copies_.end(r));
  return Status();
}

Result<std::vector<HostTensor>> Executor::outputs_collect(RunState& r) {
  std::vector<HostTensor> out;
  for (ValueId o : r.g.outputs()) {
    HostTensor h(r.g.desc(o));
    if (h.bytes() > 0)
      HR_TRY(backend_.copy_d2h(h.data(), r.value_ptr(o), h.bytes(), r.at.stream)
                 .with_context(fmt::format("copying output '{}'", r.g.values()[size_t(o)].name)));
    out.push_back(std::move(h));
  }
  HR_TRY(backend_.stream_sync(r.at.stream));
  return out;
}

Result<std::vector<HostTensor>> Executor::run_plain(RunState& r) {
  r.at.staging = nullptr;
  HR_TRY(ops_issue(r));
  return outputs_collect(r);
}

Result<std::vector<HostTensor>> Executor::run_body(RunState& r) {
  if (timing_.on) return run_timed(r);
  if (captures_.enabled() && !r.g.nodes().empty()) {
    Result<std::vector<HostTensor>> out = run_captured(r);
    if (out.ok() || out.status().code() != ErrorCode::UNSUPPORTED) return out;
  }
  return run_plain(r);
}

Result<std::vector<HostTensor>> Executor::run_attempt(
    const std::shared_ptr<const CompiledGraph>& compiled,
    const std::vector<const HostTensor*>& bound, WeightSource& weights) {
  HR_ASSIGN_OR_RETURN(residency_.plan, residency_decide(compiled, weights));
  residency_.uses = compiled->weights;
  RunState r(compiled, residency_.plan);
  r.at.bound = bound;
  r.at.stream = backend_.default_stream();
  // Inputs live from the first node and are copied before it (Note [inputs in the arena]).
  for (size_t v = 0; v < r.g.values().size(); ++v)
    if (r.g.values()[v].kind == ValueKind::INPUT) r.at.inputs.push_back(ValueId(v));
  CopyLane::schedule(r);
  HR_TRY(buffers_prepare(r, weights));
  HR_TRY(weights_bind(r, weights));
  Result<std::vector<HostTensor>> out = run_body(r);
  if (!out.ok()) {  // Note [arena reuse]: nothing may still touch the arena or the ring
    (void)backend_.stream_sync(r.at.stream);
    copies_.sync();
  }
  return out;
}

// The steps of one run a RecoveryPolicy takes (Note [OOM recovery] in memory/oom_recovery.cpp).
class Executor::Recovery final : public RecoveryRun {
 public:
  Recovery(Executor& ex, const std::shared_ptr<const CompiledGraph>& compiled,
           const std::vector<const HostTensor*>& bound, WeightSource& weights)
      : ex_(ex), compiled_(compiled), bound_(bound), weights_(weights) {}

  void caches_drop() override {
    ex_.captures_.clear();
    ex_.buffers_.ring.reset();
    ex_.buffers_.arena.reset();
    for (const WeightUse& u : compiled_->weights) {
      const Value& v = compiled_->graph.values()[size_t(u.value)];
      weights_.weight_evict(v.name, v.layout);
    }
    ex_.allocator_.cache_release(UINT64_MAX);  // the evicted blocks too (Note [weight block cache])
  }
  void holders_reclaim() override { ex_.allocator_.reclaim(UINT64_MAX); }
  uint64_t device_free() const override {
    return ex_.backend_.memory_is_host() ? UINT64_MAX : ex_.backend_.info().memory_free;
  }
  uint64_t arena_bytes() const override { return compiled_->plan->arena_bytes; }
  Result<std::vector<HostTensor>> retry(uint64_t weights_limit) override {
    ex_.recovery_.weights_limit = weights_limit;
    Result<std::vector<HostTensor>> out = ex_.run_attempt(compiled_, bound_, weights_);
    ex_.recovery_.weights_limit = UINT64_MAX;
    ++ex_.recovery_.recoveries;
    return out;
  }

 private:
  Executor& ex_;
  const std::shared_ptr<const CompiledGraph>& compiled_;
  const std::vector<const HostTensor*>& bound_;
  WeightSource& weights_;
};

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
  if (!out.ok() && out.status().code() == ErrorCode::OUT_OF_MEMORY) {
    Recovery recovery(*this, compiled, bound, weights);
    out = policies_.recovery->recover(recovery, out.status());
  }
  if (!out.ok() || !run_observer_) return out;  // the record is for an observer only
  record.weights = &weights;
  record.weight_bytes = compiled->weight_bytes;
  record.arena_bytes = compiled->plan->arena_bytes;
  record.workspace_bytes = compiled->plan->workspace_peak;
  record.patching = weights.patch_describe();
  record.patch_bytes = weights.patch_device_bytes();
  const ResidencyPlan& res = residency_.plan;
  if (res.streams()) {
    record.streamed_bytes = res.streamed_bytes;
    record.ring_bytes = res.ring_bytes;
    record.residency = last_residency_text();
  }
  return out;
}

}  // namespace hr
