// job_service_local: the JobService of one process, a thin layer over JobQueue and JobRunner.
#include "jobs/job_runner.h"
#include "jobs/job_service.h"

namespace hr {
namespace {

class LocalJobService final : public JobService {
 public:
  LocalJobService(JobQueue& q, JobRunner& r) : q_(q), r_(r) {}
  Result<Job> submit(JobSubmit s) override { return q_.submit(std::move(s)); }
  Result<size_t> remaining() override { return q_.remaining(); }
  Result<size_t> pending_count() override { return q_.pending_count(); }
  Result<size_t> running_count() override { return size_t(q_.running() ? 1 : 0); }
  Result<Json> queue_json() override { return q_.queue_json(); }
  Status pending_delete(const std::vector<std::string>& ids) override {
    q_.pending_delete(ids);
    return Status();
  }
  Status pending_clear() override {
    q_.pending_clear();
    return Status();
  }
  Result<Json> history_json(std::optional<size_t> max_items,
                            std::optional<int64_t> offset) override {
    return q_.history_json(max_items, offset);
  }
  Result<Json> history_get(const std::string& id) override { return q_.history_get(id); }
  Status history_delete(const std::vector<std::string>& ids) override {
    q_.history_delete(ids);
    return Status();
  }
  Status history_clear() override {
    q_.history_clear();
    return Status();
  }
  Result<size_t> history_count() override { return q_.history_count(); }
  Status interrupt(const std::string& id) override {
    r_.interrupt(id);
    return Status();
  }
  Status request_free(bool unload_models, bool free_memory) override {
    r_.request_free(unload_models, free_memory);
    return Status();
  }
  bool held() override { return r_.held(); }
  JobStatsSnapshot stats() override { return r_.stats(); }
  std::vector<std::string> loaded_models() override { return r_.loaded_models(); }

 private:
  JobQueue& q_;
  JobRunner& r_;
};

}  // namespace

std::unique_ptr<JobService> job_service_local(JobQueue& queue, JobRunner& runner) {
  return std::make_unique<LocalJobService>(queue, runner);
}

}  // namespace hr
