// redis_publish: PUBLISH on headroom:events or headroom:previews (redis_wire.h formats).
#include "jobs/redis_events.h"

#include <atomic>
#include <cstdio>

#include "jobs/redis_client.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_wire.h"

namespace hr {

// Note [events are best effort]: Pub/Sub delivers to the fronts subscribed at that moment and
// keeps nothing, like a ComfyUI WebSocket that reconnects. What must not be lost (the job, its
// history entry with outputs and status.messages) is written to streams and hashes; a client that
// missed `executing null` still finds the job in /history.
void redis_publish(RedisClient& redis, const JobMessage& m, const std::string& worker) {
  static std::atomic<bool> failing{false};
  const bool binary = m.binary != nullptr;
  Result<RedisReply> r =
      redis.command({"PUBLISH", binary ? redis_keys::kPreviews : redis_keys::kEvents,
                     binary ? preview_encode(m) : event_encode(m, worker)});
  if (!r.ok() && !failing.exchange(true))
    std::fprintf(stderr, "headroom worker: cannot publish events: %s\n", r.status().str().c_str());
  if (r.ok()) failing = false;
}

JobMessageSink redis_event_sink(std::shared_ptr<RedisClient> redis, std::string worker) {
  return [redis = std::move(redis), worker = std::move(worker)](const JobMessage& m) {
    redis_publish(*redis, m, worker);
  };
}

}  // namespace hr
