// A queued prompt as ComfyUI's queue holds it ([number, prompt_id, prompt, extra_data,
// outputs_to_execute]), a finished job's history record, and how a job ended.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hr {

using Json = nlohmann::json;

struct Job {
  int64_t number = 0;  // queue order: smaller first; `front` submissions are negative
  std::string prompt_id;
  Json prompt = Json::object();      // the API-format workflow as submitted
  Json extra_data = Json::object();  // client_id and whatever else the client sent
  std::vector<std::string> outputs;  // outputs_to_execute
  uint64_t seq = 0;                  // submission order; breaks ties between equal numbers

  std::string client_id() const;  // extra_data.client_id, or "" (messages go to everyone)
  Json queue_item() const;        // ComfyUI's 5-element queue item
};

// How a job ended. REJECTED: admission found no plan that fits the budget (it never ran).
enum class JobOutcome : uint8_t { SUCCESS = 0, ERROR, INTERRUPTED, REJECTED, COUNT_ };
const char* job_outcome_name(JobOutcome o);  // "success", "error", "interrupted", "rejected"

// One history entry: ComfyUI's {prompt, outputs, status, meta} under its prompt_id.
struct JobRecord {
  std::string prompt_id;
  Json entry = Json::object();
};

// A fresh prompt id in ComfyUI's format (a random UUID4, lower-case hex with dashes).
std::string prompt_id_new();

}  // namespace hr
