// RedisJobService: POST /prompt into the class streams; /queue, /history, /interrupt, /free
// across workers.
#include "jobs/redis_job_service.h"

#include "jobs/redis_client.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_queue_state.h"
#include "jobs/redis_wire.h"
#include "jobs/vram_class.h"
#include "workflow/node_def.h"
#include "workflow/prompt.h"

namespace hr {

RedisJobService::RedisJobService(std::unique_ptr<RedisClient> redis, const NodeRegistry& registry,
                                 WorkflowPlanOptions plan)
    : redis_(std::move(redis)), registry_(registry), plan_(std::move(plan)) {
  plan_.budget = UINT64_MAX;  // planned once without a budget: smallest_budget picks the class
}

RedisJobService::~RedisJobService() = default;

Result<std::unique_ptr<RedisJobService>> RedisJobService::open(const RedisUrl& url,
                                                               const NodeRegistry& registry,
                                                               WorkflowPlanOptions plan) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> redis, RedisClient::connect(url));
  std::vector<RedisArgs> groups;
  for (bool front : {false, true})
    for (uint64_t c : vram_classes())
      groups.push_back({"XGROUP", "CREATE", redis_keys::stream(c, front), redis_keys::kGroup, "0",
                        "MKSTREAM"});
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r, redis->pipeline(groups));
  for (const RedisReply& e : r)
    if (e.type == RedisReply::Type::ERROR && e.str.rfind("BUSYGROUP", 0) != 0)
      return make_error(ErrorCode::IO, "redis at {}: XGROUP CREATE: {}", url.str(), e.str);
  return std::unique_ptr<RedisJobService>(
      new RedisJobService(std::move(redis), registry, std::move(plan)));
}

// A prompt without a plan (a node class the planner does not know) goes to the smallest class,
// where every worker may take it: Note [admission without a plan].
uint64_t RedisJobService::class_of(const Json& prompt) {
  PromptValidation v = prompt_validate(prompt, registry_);
  if (!v.ok) return vram_classes().front();
  std::lock_guard<std::mutex> lock(plans_mu_);
  Result<WorkflowPlan> plan = plans_.plan(v.prompt, plan_);
  if (!plan.ok()) return vram_classes().front();
  return vram_class_for(plan->fits ? plan->smallest_budget : plan->peak);
}

Result<int64_t> RedisJobService::number_next(const JobSubmit& s) {
  // ComfyUI: the counter advances on every prompt; a given number is used instead of it.
  HR_ASSIGN_OR_RETURN(RedisReply n, redis_->command({"INCR", redis_keys::kNumber}));
  int64_t number = s.number.value_or(n.integer - 1);
  return s.front ? -number : number;
}

Result<Job> RedisJobService::submit(JobSubmit s) {
  Job j;
  j.prompt_id = s.prompt_id.empty() ? prompt_id_new() : s.prompt_id;
  HR_ASSIGN_OR_RETURN(j.number, number_next(s));
  j.prompt = std::move(s.prompt);
  j.extra_data = std::move(s.extra_data);
  j.outputs = std::move(s.outputs);
  const uint64_t vram_class = class_of(j.prompt);
  const std::string text = job_encode(j, vram_class);
  HR_ASSIGN_OR_RETURN(RedisReply running, redis_->command({"HEXISTS", redis_keys::kRunning, j.prompt_id}));
  HR_ASSIGN_OR_RETURN(RedisReply added,
                      redis_->command({"HSETNX", redis_keys::kPending, j.prompt_id, text}));
  if (added.integer == 0 || running.integer == 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "prompt_id {} is already queued", j.prompt_id);
  // Note [redis job lifecycle]: in `pending` first, so that a worker never sees an entry whose
  // job is in neither place; when the XADD fails the job is taken out again and the client told.
  Result<RedisReply> x =
      redis_->command({"XADD", redis_keys::stream(vram_class, s.front), "*", "job", text});
  if (!x.ok()) {
    (void)redis_->command({"HDEL", redis_keys::kPending, j.prompt_id});
    return x.status();
  }
  (void)control(control_encode(ControlMessage{"wake", "", false, false}));
  if (Result<size_t> n = remaining(); n.ok())
    (void)redis_->command({"PUBLISH", redis_keys::kEvents,
                           event_encode(JobMessage{"status", msg_status(*n), ""}, "")});
  return j;
}

Result<size_t> RedisJobService::remaining() { return queue_remaining(*redis_); }

Result<size_t> RedisJobService::pending_count() {
  HR_ASSIGN_OR_RETURN(RedisReply r, redis_->command({"HLEN", redis_keys::kPending}));
  return size_t(std::max<int64_t>(r.integer, 0));
}

Result<size_t> RedisJobService::running_count() {
  HR_ASSIGN_OR_RETURN(RedisReply r, redis_->command({"HLEN", redis_keys::kRunning}));
  return size_t(std::max<int64_t>(r.integer, 0));
}

Result<Json> RedisJobService::queue_json() { return hr::queue_json(*redis_); }

// The stream entries stay; a worker that reads one finds the job gone from `pending` and drops
// it (RedisJobSource::start).
Status RedisJobService::pending_delete(const std::vector<std::string>& ids) {
  if (ids.empty()) return Status();
  RedisArgs cmd = {"HDEL", redis_keys::kPending};
  cmd.insert(cmd.end(), ids.begin(), ids.end());
  return redis_->command(cmd).status();
}

Status RedisJobService::pending_clear() {
  return redis_->command({"DEL", redis_keys::kPending}).status();
}

Result<Json> RedisJobService::history_json(std::optional<size_t> max_items,
                                           std::optional<int64_t> offset) {
  return hr::history_json(*redis_, max_items, offset);
}

Result<Json> RedisJobService::history_get(const std::string& prompt_id) {
  return hr::history_get(*redis_, prompt_id);
}

Status RedisJobService::history_delete(const std::vector<std::string>& ids) {
  if (ids.empty()) return Status();
  RedisArgs hdel = {"HDEL", redis_keys::kHistory}, zrem = {"ZREM", redis_keys::kHistoryOrder};
  hdel.insert(hdel.end(), ids.begin(), ids.end());
  zrem.insert(zrem.end(), ids.begin(), ids.end());
  return redis_->transaction({hdel, zrem}).status();
}

Status RedisJobService::history_clear() {
  return redis_->command({"DEL", redis_keys::kHistory, redis_keys::kHistoryOrder}).status();
}

Result<size_t> RedisJobService::history_count() {
  HR_ASSIGN_OR_RETURN(RedisReply r, redis_->command({"ZCARD", redis_keys::kHistoryOrder}));
  return size_t(std::max<int64_t>(r.integer, 0));
}

Status RedisJobService::control(const std::string& text) {
  return redis_->command({"PUBLISH", redis_keys::kControl, text}).status();
}

Status RedisJobService::interrupt(const std::string& prompt_id) {
  return control(control_encode(ControlMessage{"interrupt", prompt_id, false, false}));
}

Status RedisJobService::request_free(bool unload_models, bool free_memory) {
  return control(control_encode(ControlMessage{"free", "", unload_models, free_memory}));
}

Status RedisJobService::vram_resend_request() {
  return control(control_encode(ControlMessage{"vram", "", false, false}));
}

Json RedisJobService::workers() {
  Result<Json> w = workers_list(*redis_);
  return w.ok() ? *w : Json::array();
}

bool RedisJobService::held() {
  for (const Json& w : workers())
    if (w.value("held", false) == true) return true;
  return false;
}

JobStatsSnapshot RedisJobService::stats() {
  JobStatsSnapshot sum;
  for (const Json& w : workers()) job_stats_add(sum, w.value("stats", Json()));
  return sum;
}

std::vector<std::string> RedisJobService::loaded_models() {
  std::vector<std::string> out;
  for (const Json& w : workers())
    for (const Json& m : w.value("loaded_models", Json::array()))
      if (m.is_string()) out.push_back(w.value("id", "") + ": " + m.get<std::string>());
  return out;
}

}  // namespace hr
