// JobExecution: validate → admit by plan → execute, reporting ComfyUI's messages on the way.
#include "jobs/job_execution.h"

#include <algorithm>
#include <exception>

#include "backend/allocator.h"
#include "core/bytes.h"
#include "memory/telemetry.h"

namespace hr {

JobExecution::JobExecution(const Job& job, JobRuntime& runtime, PromptExecutor& executor,
                           const std::atomic<bool>& interrupt, const JobMessageSink& sink,
                           JobStats& stats)
    : job_(job),
      rt_(runtime),
      executor_(executor),
      interrupt_(interrupt),
      sink_(sink),
      stats_(stats) {}

JobExecution::~JobExecution() { budget_restore(); }

void JobExecution::emit(const std::string& type, Json data, bool keep, bool broadcast) {
  if (keep) messages_.push_back(Json::array({type, data}));
  if (sink_) sink_(JobMessage{type, std::move(data), broadcast ? std::string() : job_.client_id()});
}

JobOutcome JobExecution::run(std::map<std::string, std::shared_ptr<void>>& resources) {
  emit("execution_start", msg_execution_start(job_.prompt_id), true);
  Prompt prompt;
  if (!validate(prompt) || !admit(prompt)) return outcome_;
  ExecOptions opts = rt_.exec;
  opts.interrupt = &interrupt_;
  opts.resources = &resources;
  opts.on_event = [this](const ExecEvent& e) { on_event(e); };
  // Note [worker never throws]: a node that throws (bad_alloc, a bug) fails only its job.
  Result<ExecResult> r = Status(ErrorCode::INTERNAL, "unknown exception");
  try {
    r = executor_.execute(prompt, opts);
  } catch (const std::exception& ex) {
    r = Status(ErrorCode::INTERNAL, std::string("exception: ") + ex.what());
  } catch (...) {
  }
  budget_restore();
  return finish(r);
}

bool JobExecution::validate(Prompt& prompt) {
  // Validated at submission; again here because models may have changed since (a restart).
  PromptValidation v = prompt_validate(job_.prompt, *rt_.registry);
  if (!v.ok) {
    std::string node = v.error["node_errors"].empty() ? "" : v.error["node_errors"].begin().key();
    std::string type = node.empty() ? "" : v.error["node_errors"][node].value("class_type", "");
    fail(node, type, v.summary(), "prompt_outputs_failed_validation", JobOutcome::ERROR);
    return false;
  }
  prompt = std::move(v.prompt);
  for (const auto& [id, n] : prompt.nodes) {
    if (n.class_type.find("Loader") == std::string::npos) continue;
    std::string name = n.class_type;
    for (const auto& [k, val] : n.inputs.items())
      if (val.is_string()) name.append(" ").append(val.get_ref<const std::string&>());
    loaders_.push_back(name);
  }
  if (!job_.outputs.empty()) {
    std::vector<std::string> outs;
    for (const std::string& o : prompt.outputs)
      if (std::find(job_.outputs.begin(), job_.outputs.end(), o) != job_.outputs.end())
        outs.push_back(o);
    if (!outs.empty()) prompt.outputs = std::move(outs);
  }
  return true;
}

bool JobExecution::admit(const Prompt& prompt) {
  WorkflowPlanOptions po = rt_.plan;
  if (rt_.exec.allocator) {
    po.budget = rt_.exec.allocator->budget();
    po.weights_cap = rt_.exec.allocator->weights_cap();
  }
  Result<WorkflowPlan> plan = plan_of(prompt, po);
  Admission a = admission_decide(plan);
  if (!a.unplanned.empty()) {  // Note [admission without a plan]: said, never silent
    stats_.unplanned_add();
    emit("headroom_memory",
         {{"prompt_id", job_.prompt_id}, {"node", nullptr}, {"level", "unplanned"},
          {"message", "admitted without a memory plan: " + a.unplanned}},
         true);
  }
  if (plan.ok()) {
    for (const NodePlan& n : plan->nodes) planned_peaks_[n.node_id] = n.peak;
    planned_peak_ = plan->peak;
  }
  if (a.admit) {
    if (plan.ok()) degrade_to_warning(prompt, *plan);
    return true;
  }
  fail(a.node_id, a.class_type, a.message, "headroom.AdmissionError", JobOutcome::REJECTED);
  return false;
}

// Note [warning level]: a job whose plan would take the allocator above the warning level runs
// with the budget lowered to that level, so that its nodes tile, split batches and stream weights
// as on a smaller device and the room between warning and budget stays free (for the driver,
// other processes, fragmentation). Only when its plan fits at the lowered budget: otherwise it
// runs at the full budget, which its plan fits, and says that too. One job runs at a time, so
// the lowered budget is this job's alone; it comes back when the job ends (budget_restore).
void JobExecution::degrade_to_warning(const Prompt& prompt, const WorkflowPlan& plan) {
  Allocator* alloc = rt_.exec.allocator;
  if (!alloc || !rt_.levels) return;
  const uint64_t budget = alloc->budget();
  const double fraction = rt_.levels->warning();
  const uint64_t warning = MemoryLevels::level_bytes(budget, fraction);
  if (warning == UINT64_MAX || plan.peak <= warning) return;
  WorkflowPlanOptions po = rt_.plan;
  po.budget = warning;
  Result<WorkflowPlan> low = plan_of(prompt, po);
  Json data = {{"prompt_id", job_.prompt_id},     {"node", nullptr},
               {"level", "warning"},              {"budget", budget},
               {"warning", warning},              {"planned_peak", plan.peak},
               {"degraded", low.ok() && low->fits}};
  if (!low.ok() || !low->fits) {
    data["message"] = fmt::format(
        "the plan peaks at {}, above the warning level {} ({:.0f} % of {}), and no plan fits "
        "below it: running at the full budget",
        bytes_format(plan.peak), bytes_format(warning), fraction * 100, bytes_format(budget));
    emit("headroom_memory", std::move(data), true);
    return;
  }
  std::string changes;
  for (size_t i = 0; i < low->nodes.size() && i < plan.nodes.size(); ++i) {
    const NodePlan &n = low->nodes[i], &was = plan.nodes[i];
    if (n.decision == was.decision && n.streamed_bytes == was.streamed_bytes) continue;
    changes += fmt::format("; node {} ({}): {}", n.node_id, n.class_type, n.decision);
    if (n.streamed_bytes > 0) changes += fmt::format(", streams {}", bytes_format(n.streamed_bytes));
  }
  budget_before_ = budget;
  alloc->set_budget(warning);
  for (const NodePlan& n : low->nodes) planned_peaks_[n.node_id] = n.peak;
  planned_peak_ = low->peak;
  data["planned_peak_degraded"] = low->peak;
  data["message"] = fmt::format(
      "the plan peaks at {}, above the warning level {} ({:.0f} % of {}): running with a budget "
      "of {} (planned peak {}){}",
      bytes_format(plan.peak), bytes_format(warning), fraction * 100, bytes_format(budget),
      bytes_format(warning), bytes_format(low->peak), changes);
  emit("headroom_memory", std::move(data), true);
}

Result<WorkflowPlan> JobExecution::plan_of(const Prompt& prompt,
                                           const WorkflowPlanOptions& options) {
  return rt_.plans ? rt_.plans->plan(prompt, options) : workflow_plan(prompt, options);
}

void JobExecution::budget_restore() {
  if (!budget_before_) return;
  rt_.exec.allocator->set_budget(*budget_before_);
  budget_before_.reset();
}

void JobExecution::on_event(const ExecEvent& e) {
  const std::string& id = job_.prompt_id;
  switch (e.kind) {
    case ExecEvent::Kind::CACHED:
      emit("execution_cached", msg_execution_cached(id, e.cached), true);
      cached_sent_ = true;
      break;
    case ExecEvent::Kind::EXECUTING:
      if (!cached_sent_) emit("execution_cached", msg_execution_cached(id, {}), true);
      cached_sent_ = true;
      if (!node_.empty()) executed_.push_back(node_);
      if (rt_.telemetry && !node_.empty()) node_peak_keep(rt_.telemetry->node_end());
      node_ = e.node_id;
      node_type_ = e.class_type;
      last_value_ = 0;
      last_step_ = std::chrono::steady_clock::now();
      meta_[node_] = {{"node_id", node_},
                      {"display_node", node_},
                      {"parent_node", nullptr},
                      {"real_node_id", node_}};
      if (rt_.telemetry) rt_.telemetry->node_begin(node_ + " " + node_type_, planned_peaks_[node_]);
      emit("executing", msg_executing(id, e.node_id), false);
      break;
    case ExecEvent::Kind::PROGRESS: {
      auto now = std::chrono::steady_clock::now();
      if (e.value > last_value_)
        stats_.step_add(std::chrono::duration<double>(now - last_step_).count());
      last_value_ = e.value;
      last_step_ = now;
      emit("progress", msg_progress(id, e.node_id, e.value, e.max), false);
      break;
    }
    case ExecEvent::Kind::EXECUTED:
      outputs_[e.node_id] = e.output;
      emit("executed", msg_executed(id, e.node_id, e.output), false);
      break;
    case ExecEvent::Kind::PREVIEW:
      if (sink_ && e.image)
        sink_(JobMessage{"preview", Json(), job_.client_id(), msg_preview_frame(*e.image)});
      break;
    case ExecEvent::Kind::MEMORY:
      // headroom's addition: why a node tiled, streamed or evicted (not a ComfyUI message).
      emit("headroom_memory", {{"prompt_id", id}, {"node", e.node_id}, {"message", e.message}},
           false);
      break;
    case ExecEvent::Kind::WARNING:  // headroom's addition too
      emit("headroom_warning", {{"prompt_id", id}, {"node", e.node_id}, {"message", e.message}},
           false);
      break;
  }
}

JobOutcome JobExecution::finish(const Result<ExecResult>& r) {
  if (rt_.telemetry && !node_.empty()) node_peak_keep(rt_.telemetry->node_end());
  if (!node_.empty() && r.ok()) executed_.push_back(node_);
  if (r.ok()) {
    for (const auto& [node, ui] : r->ui_outputs) outputs_[node] = ui;
    emit("execution_success", msg_execution_success(job_.prompt_id), true);
    outcome_ = JobOutcome::SUCCESS;
    return outcome_;
  }
  const Status& st = r.status();
  if (st.code() == ErrorCode::CANCELLED) {
    JobFailure f{node_, node_type_, executed_, st.message(), "", {}};
    emit("execution_interrupted", msg_execution_interrupted(job_.prompt_id, f), true, true);
    outcome_ = JobOutcome::INTERRUPTED;
    return outcome_;
  }
  oom_ = st.code() == ErrorCode::OUT_OF_MEMORY;
  return fail(node_, node_type_, st.str(), std::string("headroom.") + error_code_name(st.code()),
              JobOutcome::ERROR);
}

JobOutcome JobExecution::fail(const std::string& node_id, const std::string& node_type,
                              const std::string& message, const std::string& type,
                              JobOutcome outcome) {
  JobFailure f{node_id, node_type, executed_, message, type, {}};
  emit("execution_error", msg_execution_error(job_.prompt_id, f), true);
  outcome_ = outcome;
  return outcome_;
}

Json JobExecution::history_entry() const {
  const bool ok = outcome_ == JobOutcome::SUCCESS;
  return Json{
      {"prompt", job_.queue_item()},
      {"outputs", outputs_},
      {"status",
       {{"status_str", ok ? "success" : "error"}, {"completed", ok}, {"messages", messages_}}},
      {"meta", meta_},
      {"headroom", memory_json()}};
}

// Note [history peaks]: headroom's addition to ComfyUI's history entry: the job's planned and
// measured allocator-level peak and each executed node's (Telemetry::node_end, exact per Note
// [node peak]), so that a finished job can be compared with its plan after the fact.
//
// Each node's record also goes to the job's client as it ends (`headroom_node`), so that a
// dashboard shows exact per-node peaks live, not only those vram_update happened to sample.
void JobExecution::node_peak_keep(const NodePeak& p) {
  if (p.node.empty()) return;
  Json record = {{"class_type", node_type_},
                 {"planned_peak", p.planned},
                 {"measured_peak", p.measured},
                 {"duration_ms", p.end_ms - p.begin_ms}};
  node_peaks_[node_] = record;
  measured_peak_ = std::max(measured_peak_, p.measured);
  record["prompt_id"] = job_.prompt_id;
  record["node"] = node_;
  emit("headroom_node", std::move(record), false);
}

Json JobExecution::memory_json() const {
  return Json{{"planned_peak", planned_peak_ ? Json(*planned_peak_) : Json(nullptr)},
              {"measured_peak", node_peaks_.empty() ? Json(nullptr) : Json(measured_peak_)},
              {"nodes", node_peaks_}};
}

}  // namespace hr
