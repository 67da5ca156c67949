// workflow_plan: a workflow's memory, node by node, from a run that computes nothing.
#include "workflow/workflow_plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/plan/plan_backend.h"
#include "core/alignment.h"
#include "core/bytes.h"
#include "graph/executor.h"
#include "memory/device_profile_cache.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "workflow/execute.h"

namespace hr {

// Note [plan run]
// A workflow's plan is the workflow run by its own nodes (PromptExecutor, every node's run
// function, the model code, Executor, Allocator and the weight store) with three things changed:
// - the backend is plan_backend_create(real): the real backend's op support, layouts and
//   workspaces, but ops and copies that do nothing and memory that is address space only;
// - loaders open checkpoints for their headers only and hand out placeholder weights (Note
//   [placeholder tensors] in core/tensor.h), so nothing is read;
// - nodes write no files (ExecOptions::plan_run).
// The allocator then holds, refuses and reclaims exactly what the run's allocator would: the
// arena the executor plans, the weights uploaded or adopted, the ring when weights stream, the
// VAE's tiling and the sampler's cond/uncond split decided by the same code against the same
// room. A node's numbers are read off its run: the allocator's peak window while it runs (Note
// [peak window]), what it holds after, and the Executor's RunRecord of each model call. Any
// new node, model family or weight format is planned by running it; there is nothing to keep in
// step. Host math runs on zeros (a sampler's steps, the VAE's clamp), which is cheap beside the
// model calls it stands in for, and no decision reads a tensor's values.
// Not modelled: what the device itself refuses below the budget (other processes), and the
// CUDA context outside the allocator (plan --explain measures it apart).

namespace {

// One node's numbers while it runs (Note [plan run]).
class NodeLog {
 public:
  explicit NodeLog(Allocator& a) : allocator_(a) {}

  void begin(const std::string& id, const std::string& class_type) {
    end();
    current_ = NodePlan{};
    current_.node_id = id;
    current_.class_type = class_type;
    open_ = true;
    sources_.clear();
    decisions_.clear();
  }
  void decision(const std::string& message) { decisions_.push_back(message); }
  void record(const RunRecord& r) {
    Source& s = sources_[r.weights];
    s.weights = std::max(s.weights, r.weight_bytes);
    s.resident = r.resident_bytes;
    current_.streamed_bytes = std::max(current_.streamed_bytes, r.streamed_bytes);
    current_.ring_bytes = std::max(current_.ring_bytes, r.ring_bytes);
    if (!r.residency.empty()) current_.residency = r.residency;
    current_.arena_bytes = std::max(current_.arena_bytes, r.arena_bytes);
    current_.workspace_bytes = std::max(current_.workspace_bytes, r.workspace_bytes);
    if (!r.patching.empty()) current_.patching = r.patching;
    current_.patch_bytes = std::max(current_.patch_bytes, r.patch_bytes);
    ++current_.graph_runs;
  }
  // Closes the open node; `fits` false when it failed for want of memory.
  void end(bool fits = true) {
    if (!open_) return;
    open_ = false;
    for (const auto& [w, s] : sources_) {
      current_.weight_bytes += s.weights;
      current_.resident_bytes += s.resident;
    }
    current_.peak = allocator_.peak_window_take().total;
    current_.total_after = allocator_.total().current;
    current_.fits = fits;
    current_.decision = decision_text();
    nodes_.push_back(std::move(current_));
  }
  std::vector<NodePlan>& nodes() { return nodes_; }

 private:
  struct Source {
    uint64_t weights = 0, resident = 0;
  };
  std::string decision_text() const {
    std::string d;
    for (const std::string& m : decisions_) d += (d.empty() ? "" : "; ") + m;
    if (!current_.patching.empty())
      d += (d.empty() ? "" : "; ") + current_.patching +
           fmt::format(" ({} of factors and scratch on the device)",
                       bytes_format(current_.patch_bytes));
    if (!d.empty()) return d;
    if (current_.graph_runs == 0) return "no model";
    return fmt::format("{} model call(s)", current_.graph_runs);
  }

  Allocator& allocator_;
  NodePlan current_;
  bool open_ = false;
  std::map<const WeightSource*, Source> sources_;
  std::vector<std::string> decisions_;
  std::vector<NodePlan> nodes_;
};

ExecOptions plan_exec_options(const WorkflowPlanOptions& o, Backend& backend, Allocator& allocator,
                              Executor& executor) {
  ExecOptions e;
  e.models_dir = o.models_dir;
  e.model_paths = o.model_paths;
  e.input_dir = o.input_dir;
  e.tokenizer_dir = o.tokenizer_dir;
  e.backend = &backend;
  e.allocator = &allocator;
  e.executor = &executor;
  e.compute_dtype = o.compute_dtype;
  e.dtype_auto = o.dtype_auto;
  e.unet_weights = o.unet_weights;
  e.text_encoder_weights = o.text_encoder_weights;
  e.plan_run = true;
  return e;
}

// The nodes after a node that did not fit: listed, not planned.
void unreached_add(const Prompt& prompt, std::vector<NodePlan>& nodes) {
  std::vector<std::string> order = PromptExecutor::execution_order(prompt);
  for (size_t i = nodes.size(); i < order.size(); ++i) {
    NodePlan n;
    n.node_id = order[i];
    n.class_type = prompt.nodes.at(order[i]).class_type;
    n.fits = false;
    n.reached = false;
    n.decision = "not reached";
    nodes.push_back(std::move(n));
  }
}

// One plan run under `budget` (Note [plan run]).
Result<WorkflowPlan> plan_run(const Prompt& prompt, const WorkflowPlanOptions& o, uint64_t budget) {
  std::unique_ptr<Backend> backend = plan_backend_create(*o.backend);
  Allocator allocator(*backend, budget, eviction_policy());
  allocator.set_weights_cap(o.weights_cap);
  Executor executor(*backend, allocator, executor_policies_default(*backend));
  executor.set_device_profile(*o.device_profile);  // the run's clock (Note [device profile])
  NodeLog log(allocator);
  executor.set_run_observer([&log](const RunRecord& r) { log.record(r); });
  ExecOptions e = plan_exec_options(o, *backend, allocator, executor);
  e.on_event = [&log](const ExecEvent& ev) {
    if (ev.kind == ExecEvent::Kind::EXECUTING) log.begin(ev.node_id, ev.class_type);
    if (ev.kind == ExecEvent::Kind::MEMORY) log.decision(ev.message);
  };
  (void)allocator.peak_window_take();
  PromptExecutor pe;  // destroyed first: the models it holds give their bytes back
  Result<ExecResult> r = pe.execute(prompt, e);
  const bool oom = !r.ok() && r.status().code() == ErrorCode::OUT_OF_MEMORY;
  if (!r.ok() && !oom) return r.status();
  log.end(!oom);
  WorkflowPlan p;
  p.budget = budget;
  p.weights_counted = true;  // on the CPU too (Note [adopted bytes] in allocator.cpp)
  p.peak = allocator.total().peak;
  p.nodes = std::move(log.nodes());
  if (oom) {
    p.fits = false;
    p.why_not = r.status().message();
    unreached_add(prompt, p.nodes);
  }
  return p;
}

// The smallest budget that fits: none needs more than the unlimited run's peak, and fitting is
// monotone in the budget (more room never makes a node fail), so bisect on allocator-aligned
// budgets.
Result<uint64_t> smallest_budget(const Prompt& prompt, const WorkflowPlanOptions& o,
                                 uint64_t unlimited_peak) {
  uint64_t lo = 0, hi = unlimited_peak;  // fits at hi; lo does not (or is 0)
  while (hi - lo > kDeviceAlignment) {
    const uint64_t mid = lo + (hi - lo) / 2 / kDeviceAlignment * kDeviceAlignment;
    if (mid == lo) break;
    HR_ASSIGN_OR_RETURN(WorkflowPlan p, plan_run(prompt, o, mid));
    (p.fits ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

Result<WorkflowPlan> workflow_plan(const Prompt& prompt, const WorkflowPlanOptions& options) {
  if (!options.backend) return make_error(ErrorCode::INVALID_ARGUMENT, "workflow_plan: no backend");
  WorkflowPlanOptions o = options;
  if (!o.device_profile) o.device_profile = device_profile_load(*options.backend);
  HR_ASSIGN_OR_RETURN(WorkflowPlan plan, plan_run(prompt, o, o.budget));
  plan.device = options.backend->info().name;
  plan.compute_dtype = options.compute_dtype;
  if (!options.find_smallest_budget) return plan;
  Result<WorkflowPlan> free_run =
      o.budget == UINT64_MAX ? Result<WorkflowPlan>(plan) : plan_run(prompt, o, UINT64_MAX);
  HR_TRY(free_run.status());
  if (!free_run->fits) return plan;  // smallest_budget stays 0
  HR_ASSIGN_OR_RETURN(plan.smallest_budget, smallest_budget(prompt, o, free_run->peak));
  return plan;
}

Json workflow_plan_json(const WorkflowPlan& p) {
  Json j;
  j["device"] = p.device;
  j["dtype"] = dtype_name(p.compute_dtype);
  j["budget"] = p.budget == UINT64_MAX ? Json(nullptr) : Json(p.budget);
  j["fits"] = p.fits;
  j["peak"] = p.peak;
  j["smallest_budget"] = p.smallest_budget;
  j["weights_counted"] = p.weights_counted;
  if (!p.fits) j["why_not"] = p.why_not;
  j["nodes"] = Json::array();
  for (const NodePlan& n : p.nodes)
    j["nodes"].push_back({{"node_id", n.node_id},
                          {"class_type", n.class_type},
                          {"weight_bytes", n.weight_bytes},
                          {"resident_bytes", n.resident_bytes},
                          {"streamed_bytes", n.streamed_bytes},
                          {"ring_bytes", n.ring_bytes},
                          {"residency", n.residency},
                          {"arena_bytes", n.arena_bytes},
                          {"workspace_bytes", n.workspace_bytes},
                          {"patching", n.patching},
                          {"patch_bytes", n.patch_bytes},
                          {"graph_runs", n.graph_runs},
                          {"decision", n.decision},
                          {"total_after", n.total_after},
                          {"peak", n.peak},
                          {"fits", n.fits},
                          {"reached", n.reached}});
  return j;
}

std::string workflow_plan_format(const WorkflowPlan& p) {
  std::string s = fmt::format(
      "plan on {} in {}, budget {} (allocator level; weights {})\n\n",
      p.device, dtype_name(p.compute_dtype),
      p.budget == UINT64_MAX ? std::string("none") : bytes_format(p.budget),
      p.weights_counted ? "held for the device count" : "are host memory, not counted");
  s += "| node | class | weights | resident | streamed | arena | workspace | runs | held after | "
       "peak | decision |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const NodePlan& n : p.nodes)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} |\n", n.node_id,
                     n.class_type, bytes_format(n.weight_bytes), bytes_format(n.resident_bytes),
                     bytes_format(n.streamed_bytes), bytes_format(n.arena_bytes),
                     bytes_format(n.workspace_bytes), n.graph_runs, bytes_format(n.total_after),
                     bytes_format(n.peak), n.fits || !n.reached ? "" : "DOES NOT FIT: ",
                     n.residency.empty() || n.decision.find(n.residency) != std::string::npos
                         ? n.decision
                         : n.decision + "; " + n.residency);
  s += fmt::format("\npredicted peak {} ({} bytes); {}; smallest budget that fits: {} ({} bytes)\n",
                   bytes_format(p.peak), p.peak, p.fits ? "fits" : "does not fit: " + p.why_not,
                   bytes_format(p.smallest_budget), p.smallest_budget);
  return s;
}

}  // namespace hr
