// The prompt queue with ComfyUI's semantics: numbers in submission order (negative for
// `front`), the smallest number runs first, one job running at a time, and a history of finished
// jobs; every change goes through a JobStore first (Note [finish atomically] in job_store.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "jobs/job.h"
#include "jobs/job_source.h"
#include "jobs/job_store.h"

namespace hr {

// What POST /prompt asks for (already validated by the caller).
struct JobSubmit {
  Json prompt = Json::object();
  std::string prompt_id;          // empty: a fresh UUID
  std::optional<int64_t> number;  // ComfyUI's explicit `number`
  bool front = false;             // run before everything queued (number becomes negative)
  Json extra_data = Json::object();
  std::vector<std::string> outputs;  // outputs_to_execute
};

class JobQueue : public JobSource {
 public:
  // ComfyUI's MAXIMUM_HISTORY_SIZE.
  static constexpr size_t kMaxHistory = 10000;

  explicit JobQueue(std::unique_ptr<JobStore> store, size_t max_history = kMaxHistory);
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Loads what the store kept: pending jobs (including one that was running when the process
  // died) and history. Numbers continue after the largest one seen.
  Status open();

  // Queues a job; INVALID_ARGUMENT when its prompt_id is already queued or running.
  Result<Job> submit(JobSubmit s);
  // Waits up to `timeout` for a pending job and makes it the running one; nullopt on timeout,
  // wake() or close().
  std::optional<Job> take(std::chrono::milliseconds timeout) override;
  // Ends the running job with its history entry ({prompt, outputs, status, meta}).
  Status finish(const std::string& prompt_id, Json entry) override;
  // Puts the running job back in front of the pending ones, unfinished (a shutdown mid-job:
  // it runs again after the restart, as it would after a kill).
  void release(const std::string& prompt_id) override;
  void wake() override;
  void close();

  size_t remaining() const;  // pending + running (ComfyUI's queue_remaining)
  size_t pending_count() const override;
  std::optional<Job> running() const;
  Json queue_json() const;  // {queue_running: [...], queue_pending: [...]}
  // Removes pending jobs (not the running one); returns how many were removed.
  size_t pending_delete(const std::vector<std::string>& ids);
  size_t pending_clear();

  // ComfyUI's GET /history: all entries, or `max_items` of them starting at `offset` (negative
  // or absent: the newest max_items), as {prompt_id: entry} oldest first.
  Json history_json(std::optional<size_t> max_items, std::optional<int64_t> offset) const;
  Json history_get(const std::string& prompt_id) const;  // {prompt_id: entry} or {}
  void history_delete(const std::vector<std::string>& ids);
  void history_clear();
  size_t history_count() const;

  // Called (without the queue's lock) after every change of the pending or running set.
  void set_on_change(std::function<void()> fn);

 private:
  using Key = std::pair<int64_t, uint64_t>;  // (number, seq)
  void changed();
  void history_append_locked(JobRecord r);  // mu_ held

  std::unique_ptr<JobStore> store_;
  const size_t max_history_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Job> pending_;
  std::optional<Job> running_;
  std::vector<JobRecord> history_;  // oldest first
  int64_t next_number_ = 0;
  uint64_t next_seq_ = 1;
  bool closed_ = false;
  uint64_t wakes_ = 0;
  std::function<void()> on_change_;
};

}  // namespace hr
