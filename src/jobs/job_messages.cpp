// Builders for ComfyUI's execution messages (field names as ComfyUI's execution.py sends them).
#include "jobs/job_messages.h"

#include <chrono>

namespace hr {
namespace {

Json node_or_null(const std::string& node) { return node.empty() ? Json(nullptr) : Json(node); }

}  // namespace

std::shared_ptr<const std::string> msg_preview_frame(const std::string& png) {
  auto frame = std::make_shared<std::string>();
  frame->reserve(8 + png.size());
  for (uint32_t word : {uint32_t(1), uint32_t(2)})  // PREVIEW_IMAGE, PNG
    for (int shift = 24; shift >= 0; shift -= 8) frame->push_back(char((word >> shift) & 0xFF));
  frame->append(png);
  return frame;
}

int64_t message_timestamp_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json msg_status(size_t queue_remaining) {
  return Json{{"status", {{"exec_info", {{"queue_remaining", queue_remaining}}}}}};
}

Json msg_execution_start(const std::string& prompt_id) {
  return Json{{"prompt_id", prompt_id}, {"timestamp", message_timestamp_ms()}};
}

Json msg_execution_cached(const std::string& prompt_id, const std::vector<std::string>& nodes) {
  return Json{{"nodes", nodes}, {"prompt_id", prompt_id}, {"timestamp", message_timestamp_ms()}};
}

Json msg_executing(const std::string& prompt_id, const std::string& node) {
  return Json{
      {"node", node_or_null(node)}, {"display_node", node_or_null(node)}, {"prompt_id", prompt_id}};
}

Json msg_progress(const std::string& prompt_id, const std::string& node, int value, int max) {
  return Json{
      {"value", value}, {"max", max}, {"prompt_id", prompt_id}, {"node", node_or_null(node)}};
}

Json msg_executed(const std::string& prompt_id, const std::string& node, const Json& output) {
  return Json{{"node", node}, {"display_node", node}, {"output", output}, {"prompt_id", prompt_id}};
}

Json msg_execution_success(const std::string& prompt_id) {
  return Json{{"prompt_id", prompt_id}, {"timestamp", message_timestamp_ms()}};
}

Json msg_execution_error(const std::string& prompt_id, const JobFailure& f) {
  return Json{{"prompt_id", prompt_id},
              {"node_id", node_or_null(f.node_id)},
              {"node_type", f.node_type},
              {"executed", f.executed},
              {"exception_message", f.exception_message},
              {"exception_type", f.exception_type},
              {"traceback", f.traceback},
              {"current_inputs", Json::object()},
              {"current_outputs", Json::object()},
              {"timestamp", message_timestamp_ms()}};
}

Json msg_execution_interrupted(const std::string& prompt_id, const JobFailure& f) {
  return Json{{"prompt_id", prompt_id},
              {"node_id", node_or_null(f.node_id)},
              {"node_type", f.node_type},
              {"executed", f.executed},
              {"timestamp", message_timestamp_ms()}};
}

}  // namespace hr
