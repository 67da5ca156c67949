// The front's side of the Redis Streams queue (`headroom serve --queue redis://...`): validates
// and plans each prompt, queues it in the stream of the smallest VRAM class that fits its plan
// (Note [vram classes]), and answers ComfyUI's queue and history routes from the state every
// front and worker shares in Redis. Jobs run in `headroom worker` processes.
#pragma once

#include <memory>
#include <mutex>

#include "jobs/job_service.h"
#include "jobs/plan_cache.h"
#include "jobs/redis_url.h"
#include "workflow/workflow_plan.h"

namespace hr {

class NodeRegistry;
class RedisClient;

class RedisJobService final : public JobService {
 public:
  // Connects and creates the consumer groups of every stream; IO naming the URL when Redis is
  // not there.
  static Result<std::unique_ptr<RedisJobService>> open(const RedisUrl& url,
                                                       const NodeRegistry& registry,
                                                       WorkflowPlanOptions plan);
  ~RedisJobService() override;
  Result<Job> submit(JobSubmit s) override;
  Result<size_t> remaining() override;
  Result<size_t> pending_count() override;
  Result<size_t> running_count() override;
  Result<Json> queue_json() override;
  Status pending_delete(const std::vector<std::string>& ids) override;
  Status pending_clear() override;
  Result<Json> history_json(std::optional<size_t> max_items,
                            std::optional<int64_t> offset) override;
  Result<Json> history_get(const std::string& prompt_id) override;
  Status history_delete(const std::vector<std::string>& ids) override;
  Status history_clear() override;
  Result<size_t> history_count() override;
  Status interrupt(const std::string& prompt_id) override;
  Status request_free(bool unload_models, bool free_memory) override;
  bool held() override;
  JobStatsSnapshot stats() override;
  std::vector<std::string> loaded_models() override;
  Json workers() override;
  // Asks every worker to publish its latest vram_update again (control `vram`): a front that
  // (re)subscribed has missed the idle workers' last ones (Note [latest per worker]).
  Status vram_resend_request();

 private:
  RedisJobService(std::unique_ptr<RedisClient> redis, const NodeRegistry& registry,
                  WorkflowPlanOptions plan);
  uint64_t class_of(const Json& prompt);  // Note [vram classes]
  Result<int64_t> number_next(const JobSubmit& s);
  Status control(const std::string& text);

  std::unique_ptr<RedisClient> redis_;
  const NodeRegistry& registry_;
  WorkflowPlanOptions plan_;
  std::mutex plans_mu_;  // route handlers run on several threads
  PlanCache plans_;
};

}  // namespace hr
