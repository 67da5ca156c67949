// JobRunner: the worker thread's loop.
#include "jobs/job_runner.h"

#include <chrono>
#include <cstdio>

#include "backend/allocator.h"
#include "core/signal_stack.h"

namespace hr {
namespace {
// How often a held queue looks at memory again (Note [danger hold]).
constexpr int kHoldPollMs = 50;
}  // namespace

JobRunner::JobRunner(JobSource& queue, JobRuntime runtime, JobMessageSink sink)
    : queue_(queue), rt_(std::move(runtime)), sink_(std::move(sink)) {
  if (!rt_.plans) rt_.plans = &plans_;
}

JobRunner::~JobRunner() { stop(); }

void JobRunner::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    signal_stack_install();
    loop();
  });
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
  if (unload) {
    resources_.clear();
    plans_.clear();  // Note [plan cache]: model files are read again after an unload
  }
  if ((unload || free) && rt_.exec.allocator) {
    rt_.exec.allocator->trim_weights();
    rt_.exec.allocator->cache_release(UINT64_MAX);  // the unloaded models' blocks
  }
  if (unload || free) loaded_set({});
}

void JobRunner::loaded_set(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  loaded_ = std::move(names);
}

// Note [danger hold]: memory in use (allocator level: weights kept from earlier jobs, or
// anything else that allocates from the server's allocator) above the danger level makes the
// next job wait in the queue instead of starting into an out-of-memory error. The worker first
// gives back what only it holds idle (reclaimable cached weights); when that is not enough the
// job stays pending, and every client hears `headroom_queue_held` until memory falls below.
uint64_t JobRunner::danger_bytes() const {
  const Allocator* alloc = rt_.exec.allocator;
  return !alloc || !rt_.levels ? UINT64_MAX
                               : MemoryLevels::level_bytes(alloc->budget(), rt_.levels->danger());
}

bool JobRunner::above_danger() const {
  return rt_.exec.allocator && rt_.exec.allocator->total().current > danger_bytes();
}

bool JobRunner::danger_hold() {
  Allocator* alloc = rt_.exec.allocator;
  const uint64_t danger = danger_bytes();
  uint64_t in_use = alloc ? alloc->total().current : 0;
  const bool waiting = queue_.pending_count() > 0;
  // Idle with nothing pending, the cached models stay: a job may want them.
  if (in_use > danger && waiting) {
    alloc->reclaim(in_use - danger);
    in_use = alloc->total().current;
  }
  const bool hold = in_use > danger;
  if (hold && waiting && !held_) held_set(true, in_use, danger);
  if (!hold && held_) held_set(false, in_use, danger);
  return hold;
}

void JobRunner::held_set(bool held, uint64_t in_use, uint64_t danger) {
  held_ = held;
  if (!sink_) return;
  Json data = {{"held", held}, {"pending", queue_.pending_count()}};
  if (held) {
    data["in_use"] = in_use;
    data["danger"] = danger;
  }
  sink_(JobMessage{"headroom_queue_held", std::move(data), ""});
}

void JobRunner::loop() {
  if (rt_.on_thread_start) rt_.on_thread_start();
  while (!stop_) {
    apply_free();
    if (danger_hold()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kHoldPollMs));
      continue;
    }
    std::optional<Job> job = queue_.take(std::chrono::milliseconds(500));
    if (!job) continue;
    // Memory may have risen while take() waited: the job goes back to wait (Note [danger hold]).
    if (above_danger()) {
      queue_.release(job->prompt_id);
      continue;
    }
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
