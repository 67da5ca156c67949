// What ComfyUI's queue routes (/prompt, /queue, /history, /interrupt, /free) and /metrics ask of
// the jobs, whoever runs them: the in-process queue and worker (job_service_local), or workers
// behind Redis Streams (jobs/redis_job_service.h). Calls that reach a shared store return errors
// (Redis down) instead of guessing, so a route can answer 503.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "jobs/job.h"
#include "jobs/job_queue.h"
#include "jobs/job_stats.h"

namespace hr {

class JobRunner;

class JobService {
 public:
  virtual ~JobService() = default;
  // Queues a validated prompt (ComfyUI's number / front / client_id semantics).
  virtual Result<Job> submit(JobSubmit s) = 0;
  virtual Result<size_t> remaining() = 0;  // pending + running
  virtual Result<size_t> pending_count() = 0;
  virtual Result<size_t> running_count() = 0;
  virtual Result<Json> queue_json() = 0;  // {queue_running: [...], queue_pending: [...]}
  virtual Status pending_delete(const std::vector<std::string>& ids) = 0;
  virtual Status pending_clear() = 0;
  // As JobQueue::history_json / history_get.
  virtual Result<Json> history_json(std::optional<size_t> max_items,
                                    std::optional<int64_t> offset) = 0;
  virtual Result<Json> history_get(const std::string& prompt_id) = 0;
  virtual Status history_delete(const std::vector<std::string>& ids) = 0;
  virtual Status history_clear() = 0;
  virtual Result<size_t> history_count() = 0;
  // ComfyUI's POST /interrupt and POST /free (every worker's, for remote workers).
  virtual Status interrupt(const std::string& prompt_id) = 0;
  virtual Status request_free(bool unload_models, bool free_memory) = 0;
  virtual bool held() = 0;  // a worker holds its queue at the danger level
  virtual JobStatsSnapshot stats() = 0;  // summed over workers
  virtual std::vector<std::string> loaded_models() = 0;
  // The heartbeat records of remote workers (docs/DISTRIBUTED.md); null: the jobs run in this
  // process (its own device is the only one).
  virtual Json workers() { return Json(); }
};

std::unique_ptr<JobService> job_service_local(JobQueue& queue, JobRunner& runner);

}  // namespace hr
