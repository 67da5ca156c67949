// Reads and edits of the queue state every front and worker shares in Redis (Note [redis keys]):
// ComfyUI's /queue and /history views built from the `pending`, `running` and `history` keys.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "jobs/job.h"

namespace hr {

class RedisClient;

Result<size_t> queue_remaining(RedisClient& redis);  // HLEN pending + HLEN running
// {queue_running: [...], queue_pending: [...]} with pending ordered by number, as ComfyUI's.
Result<Json> queue_json(RedisClient& redis);
// As JobQueue::history_json: oldest first, `max_items` from `offset` (or the newest max_items).
Result<Json> history_json(RedisClient& redis, std::optional<size_t> max_items,
                          std::optional<int64_t> offset);
Result<Json> history_get(RedisClient& redis, const std::string& prompt_id);
// Drops the oldest entries beyond `max_history`.
Status history_trim(RedisClient& redis, size_t max_history);
// The heartbeat records of live workers; forgets workers whose record expired.
Result<Json> workers_list(RedisClient& redis);

}  // namespace hr
