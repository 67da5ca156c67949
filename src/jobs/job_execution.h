// One job from start to history entry: validation, admission by plan, execution with ComfyUI's
// messages, and the outcome. The worker (jobs/job_runner.h) runs one JobExecution at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "jobs/admission.h"
#include "jobs/job.h"
#include "jobs/job_messages.h"
#include "jobs/job_stats.h"
#include "jobs/memory_levels.h"
#include "jobs/plan_cache.h"
#include "workflow/execute.h"
#include "workflow/workflow_plan.h"

namespace hr {

class Telemetry;
struct NodePeak;

// What the worker runs prompts with; owned by whoever starts the worker and outliving it.
struct JobRuntime {
  const NodeRegistry* registry = nullptr;
  ExecOptions exec;          // backend, allocator, executor, folders (on_event etc. set per job)
  WorkflowPlanOptions plan;  // backend, dtype, folders; the budget is the allocator's at admission
  Telemetry* telemetry = nullptr;  // node boundaries with their planned peaks (optional)
  // Warning and danger levels (Note [warning level], Note [danger hold]); null: none apply.
  const MemoryLevels* levels = nullptr;
  // Plans of earlier jobs (Note [plan cache]); the runner sets its own. Null: plan every job.
  PlanCache* plans = nullptr;
  // Called first on the worker thread: per-thread settings of the backend's libraries (Note
  // [worker thread settings] in server/compute_stack.cpp).
  std::function<void()> on_thread_start;
};

class JobExecution {
 public:
  JobExecution(const Job& job, JobRuntime& runtime, PromptExecutor& executor,
               const std::atomic<bool>& interrupt, const JobMessageSink& sink, JobStats& stats);
  JobExecution(const JobExecution&) = delete;
  JobExecution& operator=(const JobExecution&) = delete;
  ~JobExecution();  // gives back a budget lowered by Note [warning level]

  // Runs the job to its end (never throws); `resources` are the loaded models shared by jobs.
  JobOutcome run(std::map<std::string, std::shared_ptr<void>>& resources);
  // ComfyUI's history entry {prompt, outputs, status, meta}, and headroom's peaks (Note
  // [history peaks] in job_execution.cpp).
  Json history_entry() const;
  bool failed_oom() const { return oom_; }
  // The loader nodes of the prompt ("CheckpointLoaderSimple tiny-sd1.safetensors"): their
  // models stay in the executor's output cache after the job.
  const std::vector<std::string>& loaders() const { return loaders_; }

 private:
  // Sends a message to the job's client; `keep` also records it in status.messages.
  void emit(const std::string& type, Json data, bool keep, bool broadcast = false);
  bool validate(Prompt& prompt);
  bool admit(const Prompt& prompt);
  // Note [warning level]: lowers the allocator's budget for this job when its plan would peak
  // above the warning level and a plan fits there. `plan` is the plan at the full budget.
  void degrade_to_warning(const Prompt& prompt, const WorkflowPlan& plan);
  void budget_restore();
  Result<WorkflowPlan> plan_of(const Prompt& prompt, const WorkflowPlanOptions& options);
  void on_event(const ExecEvent& e);
  void node_peak_keep(const NodePeak& p);  // the node that just ended (node_)
  Json memory_json() const;
  JobOutcome finish(const Result<ExecResult>& r);
  JobOutcome fail(const std::string& node_id, const std::string& node_type,
                  const std::string& message, const std::string& type, JobOutcome outcome);

  const Job& job_;
  JobRuntime& rt_;
  PromptExecutor& executor_;
  const std::atomic<bool>& interrupt_;
  const JobMessageSink& sink_;
  JobStats& stats_;

  Json messages_ = Json::array();
  Json outputs_ = Json::object();
  Json meta_ = Json::object();
  JobOutcome outcome_ = JobOutcome::ERROR;
  bool oom_ = false;
  bool cached_sent_ = false;
  std::string node_, node_type_;  // the node running now
  std::vector<std::string> executed_;
  std::vector<std::string> loaders_;
  std::map<std::string, uint64_t> planned_peaks_;  // node id -> planned allocator-level peak
  std::optional<uint64_t> planned_peak_;           // the whole job's, as admitted
  Json node_peaks_ = Json::object();               // node id -> Note [history peaks]
  uint64_t measured_peak_ = 0;
  std::optional<uint64_t> budget_before_;          // set while the budget is lowered
  std::chrono::steady_clock::time_point last_step_{};
  int last_value_ = 0;
};

}  // namespace hr
