// Where the worker (jobs/job_runner.h) takes its jobs from and reports them finished: the
// in-process JobQueue, or Redis Streams when fronts and workers are separate processes
// (jobs/redis_job_source.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/status.h"
#include "jobs/job.h"

namespace hr {

class JobSource {
 public:
  virtual ~JobSource() = default;
  // Waits up to `timeout` for a job and makes it this worker's running one; nullopt when none.
  virtual std::optional<Job> take(std::chrono::milliseconds timeout) = 0;
  // Ends the running job with its history entry ({prompt, outputs, status, meta}).
  virtual Status finish(const std::string& prompt_id, Json entry) = 0;
  // Puts the running job back, unfinished, to run again (a shutdown mid-job).
  virtual void release(const std::string& prompt_id) = 0;
  virtual size_t pending_count() const = 0;  // jobs waiting (Note [danger hold])
  virtual void wake() = 0;                   // ends a take() that waits
};

}  // namespace hr
