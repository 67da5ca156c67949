// Where the queue keeps its pending jobs and history so that they survive a restart: one
// interface, with an in-memory store (nothing survives) and SQLite (jobs/sqlite_store.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "jobs/job.h"

namespace hr {

// Note [finish atomically]: a job stays in the pending set while it runs and leaves it only in
// history_put(), which adds its history record in the same transaction. A process killed at any
// moment therefore restarts with every job either still pending (it runs again) or in history,
// never lost and never both.
class JobStore {
 public:
  virtual ~JobStore() = default;
  virtual Status pending_put(const Job& job) = 0;
  virtual Status pending_erase(const std::string& prompt_id) = 0;
  virtual Status pending_clear() = 0;
  // Records a finished job and removes it from the pending set (Note [finish atomically]).
  virtual Status history_put(const JobRecord& record) = 0;
  virtual Status history_erase(const std::string& prompt_id) = 0;
  virtual Status history_clear() = 0;
  // Pending jobs in any order; history oldest first.
  virtual Result<std::vector<Job>> pending_load() = 0;
  virtual Result<std::vector<JobRecord>> history_load() = 0;
};

// Keeps nothing across processes (tests, --no-persist).
std::unique_ptr<JobStore> job_store_memory();

}  // namespace hr
