// Publishing a worker's messages (ComfyUI's execution messages, vram_update, status) on the
// events channel, and binary preview frames on the previews channel, for every front to forward.
#pragma once

#include <memory>
#include <string>

#include "jobs/job_messages.h"

namespace hr {

class RedisClient;

// Never blocks for long and never throws: a message that cannot be published (Redis down) is
// dropped with one line on stderr per failure streak (Note [events are best effort]).
void redis_publish(RedisClient& redis, const JobMessage& m, const std::string& worker);
JobMessageSink redis_event_sink(std::shared_ptr<RedisClient> redis, std::string worker);

}  // namespace hr
