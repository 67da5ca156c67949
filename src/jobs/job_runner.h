// The worker: one thread that takes jobs from the queue one at a time and runs each as a
// JobExecution, so that an error, an out-of-memory failure or an interrupt ends only that job.
// Also owns what outlives jobs: loaded models and the output cache, and frees them on request.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jobs/job_execution.h"
#include "jobs/job_source.h"
#include "jobs/plan_cache.h"
#include "jobs/job_stats.h"

namespace hr {

class JobRunner {
 public:
  JobRunner(JobSource& queue, JobRuntime runtime, JobMessageSink sink);
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;
  ~JobRunner();  // stops the thread (after the running job ends)

  void start();
  // Interrupts the running job and waits for the thread to exit.
  void stop();

  // ComfyUI's POST /interrupt: stops the running job at its next step, when `prompt_id` is
  // empty or names it. Returns whether a job was interrupted.
  bool interrupt(const std::string& prompt_id = "");
  // ComfyUI's POST /free, applied by the worker between jobs (Note [free between jobs]).
  void request_free(bool unload_models, bool free_memory);

  bool busy() const { return busy_.load(); }
  // True while pending jobs wait because memory in use is above the danger level (Note
  // [danger hold] in job_runner.cpp).
  bool held() const { return held_.load(); }
  JobStatsSnapshot stats() const { return stats_.snapshot(); }
  // Models the output cache holds (the loader nodes of the last job), as "class file".
  std::vector<std::string> loaded_models() const;

 private:
  void loop();
  void run_one(const Job& job);
  void apply_free();
  bool danger_hold();
  uint64_t danger_bytes() const;  // UINT64_MAX: no level applies
  bool above_danger() const;
  void held_set(bool held, uint64_t in_use, uint64_t danger);
  void loaded_set(std::vector<std::string> names);

  JobSource& queue_;
  JobRuntime rt_;
  JobMessageSink sink_;
  JobStats stats_;
  PromptExecutor executor_;
  PlanCache plans_;  // worker thread only (rt_.plans points here)
  std::map<std::string, std::shared_ptr<void>> resources_;  // worker thread only

  std::atomic<bool> stop_{false};
  std::atomic<bool> interrupt_{false};
  std::atomic<bool> busy_{false};
  std::atomic<bool> held_{false};
  std::atomic<bool> unload_models_{false}, free_memory_{false};
  mutable std::mutex mu_;  // running_id_, loaded_
  std::string running_id_;
  std::vector<std::string> loaded_;
  std::thread thread_;
};

}  // namespace hr
