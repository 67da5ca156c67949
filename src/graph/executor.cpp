// The executor: plan cache, the one activation arena, input/weight binding, running the
// nodes in order on the backend's default stream, and copying outputs back to the host.
#include "graph/executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "graph/passes.h"
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
  const char* env = std::getenv("HEADROOM_CUDA_GRAPHS");
  capture_enabled_ = backend_.capture_supported() && !(env && std::string(env) == "0");
  const char* passes = std::getenv("HEADROOM_GRAPH_PASSES");
  passes_ = !(passes && std::string(passes) == "0");
  allocator_.reclaimable_add(this);
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
  allocator_.reclaimable_remove(this);
  captures_clear();
}

uint64_t Executor::reclaim(uint64_t bytes) {
  if (running_) return 0;
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  const uint64_t freed = arena_.size();
  arena_.reset();
  return freed;
}

void Executor::captures_clear() {
  for (auto& [k, c] : captures_)
    for (auto& [p, n] : c.staging)
      if (p) backend_.host_free_pinned(p);
  captures_.clear();
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

void Executor::release_arena() {
  std::lock_guard<std::mutex> lock(run_mu_);
  arena_.reset();
}

uint64_t Executor::arena_room(const Reclaimable* keep) {
  const uint64_t budget = allocator_.budget();
  if (budget == Allocator::kUnlimited) return UINT64_MAX;
  const uint64_t held = allocator_.total().current - arena_.size();
  const uint64_t idle = std::min(held, allocator_.reclaimable_bytes(keep, this));
  const uint64_t others = held - idle;
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
      return it->second;
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
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto [it, inserted] = plans_.emplace(key, std::shared_ptr<const CompiledGraph>(std::move(c)));
  if (inserted)
    ++plans_computed_;
  else
    ++plans_cached_;
  return it->second;
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

Result<std::vector<HostTensor>> Executor::run(const Graph& graph, const HostInputs& inputs,
                                              WeightSource& weights) {
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
  const Graph& g = compiled->graph;
  const ArenaPlan* plan = compiled->plan.get();
  HR_ASSIGN_OR_RETURN(std::vector<const HostTensor*> bound, inputs_bind(g, inputs));

  if (plan->arena_bytes > 0 && arena_.size() < plan->arena_bytes) {
    arena_.reset();  // free first: the old and the new arena never count together
    HR_ASSIGN_OR_RETURN(arena_, allocator_.allocate(plan->arena_bytes, Pool::ACTIVATIONS,
                                                    "graph arena"));
  }
  char* base = static_cast<char*>(arena_.data());
  Stream* stream = backend_.default_stream();
  const std::vector<Value>& vals = g.values();
  const std::vector<Node>& nodes = g.nodes();

  // Weights are asked for in execution order, at their first use, so that a streaming
  // WeightSource sees the order it will be asked again next run.
  std::vector<void*> weight_ptr(vals.size(), nullptr);
  auto value_ptr = [&](ValueId v) -> Result<void*> {
    ValueId s = g.storage_of(v);
    const ValueSlot& slot = plan->values[size_t(s)];
    if (slot.offset >= 0) return static_cast<void*>(base + slot.offset);
    if (!weight_ptr[size_t(s)]) {
      const Value& w = vals[size_t(s)];
      HR_ASSIGN_OR_RETURN(TensorRef ref, weights.weight_get(w.name, w.desc, w.layout));
      if (ref.desc != w.desc)
        return make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is {} but the graph expects {}",
                          w.name, ref.desc.str(), w.desc.str());
      if (!ref.data && w.desc.bytes() > 0)
        return make_error(ErrorCode::INTERNAL, "weight '{}' was served without memory", w.name);
      weight_ptr[size_t(s)] = ref.data;
    }
    return weight_ptr[size_t(s)];
  };
  auto input_copy = [&](ValueId v) -> Status {
    const HostTensor* t = bound[size_t(v)];
    if (t->bytes() == 0) return Status();
    return backend_.copy_h2d(base + plan->values[size_t(v)].offset, t->data(), t->bytes(), stream)
        .with_context(fmt::format("copying input '{}'", vals[size_t(v)].name));
  };

  // Inputs are copied just before their first reader (Note [inputs in the arena]).
  std::vector<std::vector<ValueId>> inputs_at(std::max<size_t>(nodes.size(), 1));
  for (size_t v = 0; v < vals.size(); ++v)
    if (vals[v].kind == ValueKind::INPUT)
      inputs_at[size_t(plan->values[v].first)].push_back(ValueId(v));

  // Pinned staging of each input when replaying or recording (Note [captured steps]).
  const std::vector<std::pair<void*, size_t>>* staging = nullptr;
  auto input_from = [&](ValueId v) -> Status {
    if (!staging) return input_copy(v);
    const auto& [p, n] = (*staging)[size_t(v)];
    if (n == 0) return Status();
    return backend_.copy_h2d(base + plan->values[size_t(v)].offset, p, n, stream)
        .with_context(fmt::format("copying input '{}'", vals[size_t(v)].name));
  };
  std::vector<Event*> marks;  // Note [node timing]: marks[i + 1] follows node i
  auto ops = [&]() -> Status {
    if (nodes.empty())
      for (ValueId v : inputs_at[0]) HR_TRY(input_from(v));
    std::vector<TensorRef> refs;
    if (!marks.empty()) HR_TRY(backend_.event_record(marks[0], stream));
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (ValueId v : inputs_at[i]) HR_TRY(input_from(v));
      const Node& n = nodes[i];
      const NodeSlot& ns = plan->nodes[i];
      if (ns.view) {  // Note [views]: the output aliases the input's storage
        if (!marks.empty()) HR_TRY(backend_.event_record(marks[i + 1], stream));
        continue;
      }
      refs.clear();
      for (ValueId x : n.inputs) {
        Result<void*> p = value_ptr(x);
        if (!p.ok()) return p.status().with_context(node_context(g, i));
        refs.push_back(TensorRef{g.desc(x), *p});
      }
      OpCall call;
      call.kind = n.kind;
      call.params = &n.params;
      call.inputs = refs;
      call.output = TensorRef{g.desc(n.output), base + plan->values[size_t(n.output)].offset};
      if (ns.workspace_bytes > 0) {
        call.workspace = base + ns.workspace_offset;
        call.workspace_bytes = ns.workspace_bytes;
      }
      Status st = backend_.op_run(call, stream);
      if (!st.ok()) return st.with_context(node_context(g, i));
      if (!marks.empty()) HR_TRY(backend_.event_record(marks[i + 1], stream));
    }
    return Status();
  };
  auto outputs_copy = [&]() -> Result<std::vector<HostTensor>> {
    std::vector<HostTensor> out;
    for (ValueId o : g.outputs()) {
      HostTensor h(g.desc(o));
      if (h.bytes() > 0) {
        HR_ASSIGN_OR_RETURN(void* p, value_ptr(o));
        HR_TRY(backend_.copy_d2h(h.data(), p, h.bytes(), stream)
                   .with_context(fmt::format("copying output '{}'", vals[size_t(o)].name)));
      }
      out.push_back(std::move(h));
    }
    HR_TRY(backend_.stream_sync(stream));
    return out;
  };
  auto weight_ptrs = [&]() -> Result<std::vector<void*>> {
    std::vector<void*> wptrs;
    for (const Node& n : nodes)
      for (ValueId x : n.inputs)
        if (plan->values[size_t(g.storage_of(x))].offset < 0) {
          HR_ASSIGN_OR_RETURN(void* p, value_ptr(x));
          wptrs.push_back(p);
        }
    return wptrs;
  };
  // Note [node timing]
  auto timed = [&]() -> Result<std::vector<HostTensor>> {
    auto it = captures_.find(compiled.get());
    if (it != captures_.end() && it->second.work && it->second.arena == base) {
      HR_ASSIGN_OR_RETURN(std::vector<void*> wptrs, weight_ptrs());
      if (wptrs == it->second.weights)
        for (int k = 0; k < 3; ++k) HR_TRY(backend_.captured_launch(it->second.work.get(), stream));
    }
    while (timing_events_.size() < nodes.size() + 1) {
      HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, backend_.timing_event_create());
      timing_events_.push_back(std::move(e));
    }
    for (size_t i = 0; i <= nodes.size(); ++i) marks.push_back(timing_events_[i].get());
    staging = nullptr;
    HR_TRY(ops());
    HR_ASSIGN_OR_RETURN(std::vector<HostTensor> out, outputs_copy());
    node_ms_.assign(nodes.size(), 0.0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      HR_ASSIGN_OR_RETURN(node_ms_[i], backend_.event_elapsed_ms(marks[i], marks[i + 1]));
    }
    marks.clear();
    return out;
  };
  // Replay or record (Note [captured steps]); any failure falls back to a plain run.
  auto captured = [&]() -> Result<std::vector<HostTensor>> {
    Capture& cap = captures_[compiled.get()];
    cap.plan = compiled;
    if (cap.failed || cap.runs++ < 1) return Status(ErrorCode::UNSUPPORTED, "not captured yet");
    HR_ASSIGN_OR_RETURN(std::vector<void*> wptrs, weight_ptrs());
    if (cap.work && (cap.arena != base || cap.weights != wptrs)) cap.work.reset();
    if (cap.staging.size() != vals.size()) {
      for (auto& [p, n] : cap.staging)
        if (p) backend_.host_free_pinned(p);
      cap.staging.assign(vals.size(), {nullptr, 0});
      for (size_t v = 0; v < vals.size(); ++v) {
        if (vals[v].kind != ValueKind::INPUT || vals[v].desc.bytes() == 0) continue;
        HR_ASSIGN_OR_RETURN(void* p, backend_.host_alloc_pinned(vals[v].desc.bytes()));
        cap.staging[v] = {p, vals[v].desc.bytes()};
      }
    }
    for (size_t v = 0; v < vals.size(); ++v)
      if (cap.staging[v].second) std::memcpy(cap.staging[v].first, bound[v]->data(), cap.staging[v].second);
    staging = &cap.staging;
    if (!cap.work) {
      HR_TRY(backend_.stream_sync(stream));
      Status st = backend_.capture_begin(stream);
      if (st.ok()) {
        Status ran = ops();
        Result<std::unique_ptr<CapturedWork>> w = backend_.capture_end(stream);
        if (ran.ok() && w.ok()) {
          cap.work = std::move(w).value();
          cap.arena = base;
          cap.weights = wptrs;
        }
      }
      if (!cap.work) {
        cap.failed = true;
        staging = nullptr;
        return Status(ErrorCode::UNSUPPORTED, "capture failed");
      }
    }
    HR_TRY(backend_.captured_launch(cap.work.get(), stream));
    return outputs_copy();
  };
  auto body = [&]() -> Result<std::vector<HostTensor>> {
    if (timing_) return timed();
    if (capture_enabled_ && !nodes.empty()) {
      Result<std::vector<HostTensor>> r = captured();
      if (r.ok() || r.status().code() != ErrorCode::UNSUPPORTED) return r;
    }
    staging = nullptr;
    HR_TRY(ops());
    return outputs_copy();
  };
  Result<std::vector<HostTensor>> r = body();
  if (!r.ok()) (void)backend_.stream_sync(stream);  // Note [arena reuse]
  return r;
}

}  // namespace hr
