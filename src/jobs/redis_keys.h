// The names of everything headroom keeps in Redis (Note [redis keys]); docs/DISTRIBUTED.md
// lists them with their formats.
#pragma once

#include <cstdint>
#include <string>

namespace hr::redis_keys {

// Note [redis keys]: all under "headroom:" so that one Redis can hold other data too.
//   jobs:<class>[:front]  stream per VRAM class (Note [vram classes]), entries {job: JSON}
//   pending               hash prompt_id -> job JSON: queued, not yet taken by a worker
//   running               hash prompt_id -> {job, worker, stream, entry, started}
//   history               hash prompt_id -> ComfyUI's history entry
//   history:order         sorted set prompt_id by history:seq (oldest first)
//   number                ComfyUI's prompt number counter (INCR)
//   dead                  stream of jobs given up after too many deliveries, or malformed
//   workers               set of worker ids; worker:<id> its heartbeat record (expires)
//   events, previews      Pub/Sub channels workers -> fronts; control: fronts -> workers
inline const std::string kPrefix = "headroom:";
inline const std::string kPending = kPrefix + "pending";
inline const std::string kRunning = kPrefix + "running";
inline const std::string kHistory = kPrefix + "history";
inline const std::string kHistoryOrder = kPrefix + "history:order";
inline const std::string kHistorySeq = kPrefix + "history:seq";
inline const std::string kNumber = kPrefix + "number";
inline const std::string kDead = kPrefix + "dead";
inline const std::string kWorkers = kPrefix + "workers";
inline const std::string kEvents = kPrefix + "events";
inline const std::string kPreviews = kPrefix + "previews";
inline const std::string kControl = kPrefix + "control";
inline const std::string kGroup = "workers";  // the consumer group of every job stream

std::string stream(uint64_t vram_class, bool front);
std::string worker(const std::string& id);

}  // namespace hr::redis_keys
