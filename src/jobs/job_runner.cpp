// JobRunner: the worker thread's loop.
#include "jobs/job_runner.h"

#include <chrono>
#include <cstdio>

#include "backend/allocator.h"

namespace hr {

JobRunner::JobRunner(JobQueue& queue, JobRuntime runtime, JobMessageSink sink)
    : queue_(queue), rt_(std::move(runtime)), sink_(std::move(sink)) {}

JobRunner::~JobRunner() { stop(); }

void JobRunner::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
}

void JobRunner::stop() {
  stop_ = true;
  interrupt_ = true;
  queue_.wake();
  if (thread_.joinable()) thread_.join();
}

bool JobRunner::interrupt(const std::string& prompt_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_id_.empty() || (!prompt_id.empty() && prompt_id != running_id_)) return false;
  interrupt_ = true;
  return true;
}

// Note [free between jobs]: models and cached outputs belong to the worker thread; another
// thread only sets flags, and the worker frees between jobs (ComfyUI does the same).
void JobRunner::request_free(bool unload_models, bool free_memory) {
  if (unload_models) unload_models_ = true;
  if (free_memory) free_memory_ = true;
  queue_.wake();
}

std::vector<std::string> JobRunner::loaded_models() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_;
}

void JobRunner::apply_free() {
  const bool unload = unload_models_.exchange(false), free = free_memory_.exchange(false);
  if (unload || free) executor_.cache_clear();
  if (unload) resources_.clear();
  if ((unload || free) && rt_.exec.allocator) rt_.exec.allocator->trim_weights();
  if (unload || free) loaded_set({});
}

void JobRunner::loaded_set(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  loaded_ = std::move(names);
}

void JobRunner::loop() {
  if (rt_.on_thread_start) rt_.on_thread_start();
  while (!stop_) {
    apply_free();
    std::optional<Job> job = queue_.take(std::chrono::milliseconds(500));
    if (!job) continue;
    run_one(*job);
  }
}

void JobRunner::run_one(const Job& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_id_ = job.prompt_id;
  }
  if (!stop_) interrupt_ = false;
  busy_ = true;
  JobExecution ex(job, rt_, executor_, interrupt_, sink_, stats_);
  JobOutcome outcome = ex.run(resources_);
  if (stop_ && outcome == JobOutcome::INTERRUPTED) {
    queue_.release(job.prompt_id);  // shut down mid-job: it runs again after a restart
    std::lock_guard<std::mutex> lock(mu_);
    running_id_.clear();
    busy_ = false;
    return;
  }
  // After an out-of-memory failure (the allocator's recovery already failed) nothing of the
  // job is worth keeping: the next job starts from a clean device.
  if (ex.failed_oom()) {
    executor_.cache_clear();
    resources_.clear();
  }
  loaded_set(ex.failed_oom() ? std::vector<std::string>() : ex.loaders());
  stats_.outcome_add(outcome, ex.failed_oom());
  Status st = queue_.finish(job.prompt_id, ex.history_entry());
  if (!st.ok()) std::fprintf(stderr, "headroom serve: %s\n", st.str().c_str());
  if (sink_) sink_(JobMessage{"executing", msg_executing(job.prompt_id, ""), job.client_id()});
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_id_.clear();
  }
  busy_ = false;
}

}  // namespace hr
