// ComfyUI's execution messages ({"type", "data"}) as the worker emits them; the server sends
// them over WebSocket and history keeps some of them in status.messages.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jobs/job.h"

namespace hr {

struct JobMessage {
  std::string type;
  Json data = Json::object();
  // The client it is for (extra_data.client_id); empty: every connected client (ComfyUI's
  // send_sync with sid None).
  std::string client_id;
  // A binary WebSocket frame to send instead of `data` (ComfyUI's preview frames).
  std::shared_ptr<const std::string> binary;
};
using JobMessageSink = std::function<void(const JobMessage&)>;

int64_t message_timestamp_ms();  // wall clock, ms since the epoch (ComfyUI: time.time() * 1000)

// Note [preview frames]: ComfyUI's binary WebSocket frame for a preview picture: a big-endian
// uint32 event type (1, PREVIEW_IMAGE), a big-endian uint32 image type (1 JPEG, 2 PNG), then the
// image file's bytes. headroom's previews are PNG.
std::shared_ptr<const std::string> msg_preview_frame(const std::string& png);

Json msg_status(size_t queue_remaining);  // data of `status` (sid added by the server)
Json msg_execution_start(const std::string& prompt_id);
Json msg_execution_cached(const std::string& prompt_id, const std::vector<std::string>& nodes);
// `node` empty: null, the end of the prompt (clients wait for exactly this).
Json msg_executing(const std::string& prompt_id, const std::string& node);
Json msg_progress(const std::string& prompt_id, const std::string& node, int value, int max);
Json msg_executed(const std::string& prompt_id, const std::string& node, const Json& output);
Json msg_execution_success(const std::string& prompt_id);

// What execution_error and execution_interrupted report about the failing node.
struct JobFailure {
  std::string node_id;
  std::string node_type;
  std::vector<std::string> executed;
  std::string exception_message;
  std::string exception_type;
  std::vector<std::string> traceback;
};
Json msg_execution_error(const std::string& prompt_id, const JobFailure& f);
Json msg_execution_interrupted(const std::string& prompt_id, const JobFailure& f);

}  // namespace hr
