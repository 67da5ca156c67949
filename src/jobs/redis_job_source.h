// The worker's side of the Redis Streams queue: takes jobs from the streams of its VRAM classes
// (XREADGROUP), claims jobs whose worker died (XAUTOCLAIM after the lease), moves jobs that keep
// killing workers to the dead-letter stream, and finishes a job with XACK plus its history entry
// in one MULTI/EXEC (Note [redis job lifecycle]).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jobs/job_messages.h"
#include "jobs/job_source.h"

namespace hr {

class RedisClient;

struct RedisWorkerOptions {
  std::string worker_id;           // the consumer name; unique per worker process
  uint64_t budget = UINT64_MAX;    // reads every VRAM class <= budget (Note [vram classes])
  std::chrono::milliseconds lease{10000};  // a job whose worker is silent this long runs again
  int max_deliveries = 3;          // a job delivered more often goes to the dead-letter stream
  size_t max_history = 10000;      // ComfyUI's MAXIMUM_HISTORY_SIZE, across all workers
  // Test hook (HEADROOM_WORKER_CRASH_ON): the worker kills itself (SIGKILL) when it starts a job
  // whose prompt contains this text, to test redelivery and the dead-letter stream.
  std::string crash_marker;
};

class RedisJobSource final : public JobSource {
 public:
  // Creates the consumer group of each stream it reads (XGROUP CREATE ... MKSTREAM).
  static Result<std::unique_ptr<RedisJobSource>> open(std::shared_ptr<RedisClient> redis,
                                                       RedisWorkerOptions options);
  std::optional<Job> take(std::chrono::milliseconds timeout) override;
  Status finish(const std::string& prompt_id, Json entry) override;
  void release(const std::string& prompt_id) override;
  size_t pending_count() const override;
  void wake() override;

  // Keeps the running job's lease (the heartbeat calls it every second).
  void lease_renew();
  std::string running_id() const;
  const std::vector<std::string>& streams() const { return streams_; }
  // Where status and dead-letter messages go (the events channel).
  void set_sink(JobMessageSink sink) { sink_ = std::move(sink); }

 private:
  struct Delivery {
    std::string stream, entry, fields_job;  // the entry's "job" field, as stored
    int64_t deliveries = 1;
  };
  RedisJobSource(std::shared_ptr<RedisClient> redis, RedisWorkerOptions o);
  Status groups_create();
  Result<std::optional<Delivery>> claim_expired();
  Result<std::optional<Delivery>> read_new();
  Result<std::optional<Job>> start(const Delivery& d);
  Status dead_letter(const Delivery& d, const std::string& why, const Job* job);
  Status drop(const Delivery& d);  // XACK + XDEL
  void status_publish();
  void error_log(const Status& st);

  std::shared_ptr<RedisClient> redis_;
  RedisWorkerOptions opt_;
  std::vector<std::string> streams_;  // in the order they are read (Note [redis job lifecycle])
  JobMessageSink sink_;
  std::chrono::steady_clock::time_point next_claim_{};
  mutable std::mutex mu_;  // current_, woken_
  std::condition_variable cv_;
  bool woken_ = false;
  std::optional<Delivery> current_;
  std::string current_id_;
  Job current_job_;
  bool failing_ = false;
};

}  // namespace hr
