// ComfyUI's queue and history views over the shared Redis keys.
#include "jobs/redis_queue_state.h"

#include <algorithm>
#include <cstdio>

#include "core/json_parse.h"
#include "jobs/redis_client.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_wire.h"

namespace hr {
namespace {

// Queue items of every job in hash `key`; entries that do not parse are named on stderr.
std::vector<Job> jobs_of(const RedisReply& values, const char* what) {
  std::vector<Job> out;
  for (const RedisReply& v : values.elements) {
    Result<Json> j = json_parse(v.str, kJsonStoredMaxDepth);
    // running records wrap the job: {"job": {...}, "worker": ...}
    if (j.ok() && j->is_object() && j->contains("job")) j = (*j)["job"];
    Result<Job> job = job_decode(j.ok() ? j->dump() : v.str);
    if (job.ok())
      out.push_back(std::move(job).value());
    else
      std::fprintf(stderr, "headroom: skipping a %s record: %s\n", what,
                   job.status().str().c_str());
  }
  return out;
}

}  // namespace

Result<size_t> queue_remaining(RedisClient& redis) {
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r,
                      redis.pipeline({{"HLEN", redis_keys::kPending}, {"HLEN", redis_keys::kRunning}}));
  return size_t(std::max<int64_t>(r.at(0).integer, 0) + std::max<int64_t>(r.at(1).integer, 0));
}

Result<Json> queue_json(RedisClient& redis) {
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r,
                      redis.pipeline({{"HVALS", redis_keys::kRunning}, {"HVALS", redis_keys::kPending}}));
  std::vector<Job> running = jobs_of(r.at(0), "running"), pending = jobs_of(r.at(1), "pending");
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Job& a, const Job& b) { return a.number < b.number; });
  Json run = Json::array(), pend = Json::array();
  for (const Job& j : running) run.push_back(j.queue_item());
  for (const Job& j : pending) pend.push_back(j.queue_item());
  return Json{{"queue_running", run}, {"queue_pending", pend}};
}

Result<Json> history_json(RedisClient& redis, std::optional<size_t> max_items,
                          std::optional<int64_t> offset) {
  HR_ASSIGN_OR_RETURN(RedisReply n, redis.command({"ZCARD", redis_keys::kHistoryOrder}));
  const int64_t size = n.integer;
  int64_t begin = 0, end = size;
  if (max_items) {  // ComfyUI: offset -1 (the default) means the last max_items entries
    begin = offset && *offset >= 0 ? *offset : std::max<int64_t>(0, size - int64_t(*max_items));
    end = std::min<int64_t>(size, begin + int64_t(*max_items));
  } else if (offset && *offset >= 0) {
    begin = *offset;
  }
  Json out = Json::object();
  if (begin >= end) return out;
  HR_ASSIGN_OR_RETURN(RedisReply ids, redis.command({"ZRANGE", redis_keys::kHistoryOrder,
                                                     std::to_string(begin), std::to_string(end - 1)}));
  if (ids.elements.empty()) return out;
  RedisArgs get = {"HMGET", redis_keys::kHistory};
  for (const RedisReply& id : ids.elements) get.push_back(id.str);
  HR_ASSIGN_OR_RETURN(RedisReply entries, redis.command(get));
  for (size_t i = 0; i < ids.elements.size(); ++i) {
    Result<Json> e = json_parse(entries.at(i).str, kJsonStoredMaxDepth);
    if (e.ok() && e->is_object()) out[ids.elements[i].str] = std::move(e).value();
  }
  return out;
}

Result<Json> history_get(RedisClient& redis, const std::string& prompt_id) {
  HR_ASSIGN_OR_RETURN(RedisReply r, redis.command({"HGET", redis_keys::kHistory, prompt_id}));
  Result<Json> e = json_parse(r.str, kJsonStoredMaxDepth);
  if (r.nil() || !e.ok() || !e->is_object()) return Json::object();
  return Json{{prompt_id, std::move(e).value()}};
}

Status history_trim(RedisClient& redis, size_t max_history) {
  HR_ASSIGN_OR_RETURN(RedisReply n, redis.command({"ZCARD", redis_keys::kHistoryOrder}));
  if (n.integer <= int64_t(max_history)) return Status();
  HR_ASSIGN_OR_RETURN(RedisReply ids,
                      redis.command({"ZRANGE", redis_keys::kHistoryOrder, "0",
                                     std::to_string(n.integer - int64_t(max_history) - 1)}));
  if (ids.elements.empty()) return Status();
  RedisArgs hdel = {"HDEL", redis_keys::kHistory}, zrem = {"ZREM", redis_keys::kHistoryOrder};
  for (const RedisReply& id : ids.elements) {
    hdel.push_back(id.str);
    zrem.push_back(id.str);
  }
  return redis.transaction({hdel, zrem}).status();
}

Result<Json> workers_list(RedisClient& redis) {
  HR_ASSIGN_OR_RETURN(RedisReply ids, redis.command({"SMEMBERS", redis_keys::kWorkers}));
  Json out = Json::array();
  if (ids.elements.empty()) return out;
  RedisArgs get = {"MGET"};
  for (const RedisReply& id : ids.elements) get.push_back(redis_keys::worker(id.str));
  HR_ASSIGN_OR_RETURN(RedisReply recs, redis.command(get));
  RedisArgs gone = {"SREM", redis_keys::kWorkers};
  for (size_t i = 0; i < ids.elements.size(); ++i) {
    Result<Json> w = json_parse(recs.at(i).str, kJsonStoredMaxDepth);
    if (recs.at(i).nil() || !w.ok() || !w->is_object())
      gone.push_back(ids.elements[i].str);
    else
      out.push_back(std::move(w).value());
  }
  if (gone.size() > 2) (void)redis.command(gone);
  std::sort(out.begin(), out.end(),
            [](const Json& a, const Json& b) { return a.value("id", "") < b.value("id", ""); });
  return out;
}

}  // namespace hr
