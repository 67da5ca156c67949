// JSON encodings of jobs, events and control messages, with checked decoding.
#include "jobs/redis_wire.h"

#include "core/json_parse.h"

namespace hr {
namespace {

Result<Json> object_parse(const std::string& text, const char* what) {
  Result<Json> j = json_parse(text, kJsonStoredMaxDepth);
  if (!j.ok())
    return make_error(ErrorCode::CORRUPT, "malformed {} ({}): {:.80}", what, j.status().message(),
                      text);
  if (!j->is_object())
    return make_error(ErrorCode::CORRUPT, "malformed {} (not a JSON object): {:.80}", what, text);
  return j;
}

}  // namespace

std::string job_encode(const Job& job, uint64_t vram_class) {
  return Json{{"number", job.number},       {"prompt_id", job.prompt_id}, {"prompt", job.prompt},
              {"extra_data", job.extra_data}, {"outputs", job.outputs},   {"vram_class", vram_class}}
      .dump();
}

Result<Job> job_decode(const std::string& text) {
  HR_ASSIGN_OR_RETURN(Json j, object_parse(text, "job"));
  Job job;
  const Json& id = j["prompt_id"];
  const Json& number = j["number"];
  if (!id.is_string() || id.get_ref<const std::string&>().empty() ||
      !number.is_number_integer() || !j["prompt"].is_object())
    return make_error(ErrorCode::CORRUPT, "malformed job (prompt_id, number, prompt): {:.80}",
                      text);
  job.prompt_id = id;
  job.number = number;
  job.prompt = j["prompt"];
  if (j["extra_data"].is_object()) job.extra_data = j["extra_data"];
  if (j["outputs"].is_array())
    for (const Json& o : j["outputs"])
      if (o.is_string()) job.outputs.push_back(o);
  return job;
}

std::string event_encode(const JobMessage& m, const std::string& worker) {
  return Json{{"type", m.type}, {"data", m.data}, {"client_id", m.client_id}, {"worker", worker}}
      .dump();
}

Result<JobMessage> event_decode(const std::string& text) {
  HR_ASSIGN_OR_RETURN(Json j, object_parse(text, "event"));
  if (!j["type"].is_string()) return make_error(ErrorCode::CORRUPT, "event without a type");
  JobMessage m;
  m.type = j["type"];
  m.data = j["data"];
  if (j["client_id"].is_string()) m.client_id = j["client_id"];
  return m;
}

std::string preview_encode(const JobMessage& m) {
  std::string out = m.client_id + "\n";
  if (m.binary) out += *m.binary;
  return out;
}

Result<JobMessage> preview_decode(const std::string& text) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return make_error(ErrorCode::CORRUPT, "preview without a client");
  JobMessage m;
  m.type = "preview";
  m.client_id = text.substr(0, nl);
  m.binary = std::make_shared<const std::string>(text.substr(nl + 1));
  return m;
}

std::string control_encode(const ControlMessage& c) {
  return Json{{"op", c.op},
              {"prompt_id", c.prompt_id},
              {"unload_models", c.unload_models},
              {"free_memory", c.free_memory}}
      .dump();
}

Result<ControlMessage> control_decode(const std::string& text) {
  HR_ASSIGN_OR_RETURN(Json j, object_parse(text, "control message"));
  ControlMessage c;
  if (!j["op"].is_string()) return make_error(ErrorCode::CORRUPT, "control message without op");
  c.op = j["op"];
  if (j["prompt_id"].is_string()) c.prompt_id = j["prompt_id"];
  c.unload_models = j.value("unload_models", false) == true;
  c.free_memory = j.value("free_memory", false) == true;
  return c;
}

}  // namespace hr
