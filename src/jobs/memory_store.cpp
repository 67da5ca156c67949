// The in-memory JobStore: the same contract as SQLite, gone with the process.
#include <algorithm>
#include <map>
#include <mutex>

#include "jobs/job_store.h"

namespace hr {
namespace {

class MemoryJobStore final : public JobStore {
 public:
  Status pending_put(const Job& job) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[job.prompt_id] = job;
    return Status();
  }
  Status pending_erase(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(id);
    return Status();
  }
  Status pending_clear() override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
    return Status();
  }
  Status history_put(const JobRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(r.prompt_id);
    erase_history(r.prompt_id);
    history_.push_back(r);
    return Status();
  }
  Status history_erase(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    erase_history(id);
    return Status();
  }
  Status history_clear() override {
    std::lock_guard<std::mutex> lock(mu_);
    history_.clear();
    return Status();
  }
  Result<std::vector<Job>> pending_load() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Job> jobs;
    for (const auto& [id, j] : pending_) jobs.push_back(j);
    return jobs;
  }
  Result<std::vector<JobRecord>> history_load() override {
    std::lock_guard<std::mutex> lock(mu_);
    return history_;
  }

 private:
  void erase_history(const std::string& id) {
    history_.erase(std::remove_if(history_.begin(), history_.end(),
                                  [&](const JobRecord& r) { return r.prompt_id == id; }),
                   history_.end());
  }
  std::mutex mu_;
  std::map<std::string, Job> pending_;
  std::vector<JobRecord> history_;
};

}  // namespace

std::unique_ptr<JobStore> job_store_memory() { return std::make_unique<MemoryJobStore>(); }

}  // namespace hr
