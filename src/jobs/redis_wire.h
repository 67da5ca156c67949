// The formats of what headroom puts in Redis: a job in a stream entry or a hash, an event on
// Pub/Sub, a control message (docs/DISTRIBUTED.md shows each). Decoding never trusts its input:
// malformed text is an error, never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "jobs/job.h"
#include "jobs/job_messages.h"

namespace hr {

// {"number", "prompt_id", "prompt", "extra_data", "outputs", "vram_class"}.
std::string job_encode(const Job& job, uint64_t vram_class);
Result<Job> job_decode(const std::string& text);

// Events channel: {"type", "data", "client_id", "worker"}; the previews channel carries binary
// frames as "<client_id>\n<frame bytes>".
std::string event_encode(const JobMessage& m, const std::string& worker);
Result<JobMessage> event_decode(const std::string& text);
std::string preview_encode(const JobMessage& m);
Result<JobMessage> preview_decode(const std::string& text);

// Control channel, fronts to workers: {"op": "interrupt", "prompt_id"} | {"op": "free",
// "unload_models", "free_memory"} | {"op": "wake"} (a job was queued) | {"op": "vram"} (publish
// the latest vram_update again: a front subscribed).
struct ControlMessage {
  std::string op;
  std::string prompt_id;
  bool unload_models = false, free_memory = false;
};
std::string control_encode(const ControlMessage& c);
Result<ControlMessage> control_decode(const std::string& text);

}  // namespace hr
