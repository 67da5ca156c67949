// ComfyUI's queue routes: /prompt, /queue, /history, /interrupt, /free.
#include <optional>

#include "jobs/job_queue.h"
#include "jobs/job_runner.h"
#include "server/routes.h"
#include "workflow/prompt.h"

namespace hr {

Result<Json> request_json(const HttpRequest& req, std::optional<Json> empty_as) {
  if (req.body.empty() && empty_as) return *empty_as;
  Json j = Json::parse(req.body, nullptr, false);
  if (j.is_discarded())
    return make_error(ErrorCode::INVALID_ARGUMENT, "the request body is not valid JSON");
  return j;
}

HttpResponse prompt_error(const std::string& type, const std::string& message,
                          const std::string& details) {
  return HttpResponse::json(400, Json{{"error",
                                       {{"type", type},
                                        {"message", message},
                                        {"details", details},
                                        {"extra_info", Json::object()}}},
                                      {"node_errors", Json::object()}});
}

namespace {

std::vector<std::string> string_list(const Json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const Json& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

// ComfyUI's POST /prompt: validate, then queue with number / front / client_id / extra_data.
HttpResponse post_prompt(ServerContext& ctx, const HttpRequest& req) {
  Result<Json> body = request_json(req);
  if (!body.ok() || !body->is_object())
    return prompt_error("invalid_prompt", "Invalid prompt: the body is not a JSON object");
  if (!body->contains("prompt"))
    return prompt_error("no_prompt", "No prompt provided", "No prompt provided");
  PromptValidation v = prompt_validate((*body)["prompt"], ctx.registry);
  if (!v.ok) return HttpResponse::json(400, v.error);
  JobSubmit s;
  s.prompt = (*body)["prompt"];
  if (body->contains("prompt_id") && (*body)["prompt_id"].is_string())
    s.prompt_id = (*body)["prompt_id"];
  if (body->contains("number") && (*body)["number"].is_number())
    s.number = int64_t((*body)["number"].get<double>());
  s.front = body->value("front", false) == true;
  if (body->contains("extra_data") && (*body)["extra_data"].is_object())
    s.extra_data = (*body)["extra_data"];
  if (body->contains("client_id") && (*body)["client_id"].is_string())
    s.extra_data["client_id"] = (*body)["client_id"];
  s.outputs = v.prompt.outputs;
  if (body->contains("partial_execution_targets")) {
    std::vector<std::string> targets = string_list((*body)["partial_execution_targets"]);
    if (!targets.empty()) s.outputs = targets;
  }
  Result<Job> job = ctx.queue.submit(std::move(s));
  if (!job.ok()) return prompt_error("invalid_prompt", job.status().message());
  return HttpResponse::json(200, Json{{"prompt_id", job->prompt_id},
                                      {"number", job->number},
                                      {"node_errors", Json::object()}});
}

// POST /queue and POST /history: {clear: true} and/or {delete: [prompt_id, ...]}.
HttpResponse post_clear_delete(const HttpRequest& req, const std::function<void()>& clear,
                               const std::function<void(const std::vector<std::string>&)>& del) {
  Result<Json> body = request_json(req, Json::object());
  if (!body.ok() || !body->is_object()) return HttpResponse::error(400, "expected a JSON object");
  if (body->value("clear", false) == true) clear();
  if (body->contains("delete")) del(string_list((*body)["delete"]));
  return HttpResponse::text(200, "");
}

std::optional<int64_t> query_int(const HttpRequest& req, const std::string& key) {
  auto it = req.query.find(key);
  if (it == req.query.end()) return std::nullopt;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

void routes_add_queue(Router& r, ServerContext& ctx) {
  r.add("POST", "/prompt", [&ctx](const HttpRequest& req, auto&) { return post_prompt(ctx, req); });
  r.add("GET", "/prompt", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::json(200,
                              Json{{"exec_info", {{"queue_remaining", ctx.queue.remaining()}}}});
  });
  r.add("GET", "/queue", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::json(200, ctx.queue.queue_json());
  });
  r.add("POST", "/queue", [&ctx](const HttpRequest& req, auto&) {
    return post_clear_delete(
        req, [&] { ctx.queue.pending_clear(); },
        [&](const std::vector<std::string>& ids) { ctx.queue.pending_delete(ids); });
  });
  r.add("GET", "/history", [&ctx](const HttpRequest& req, auto&) {
    std::optional<int64_t> max = query_int(req, "max_items");
    std::optional<size_t> max_items;
    if (max && *max >= 0) max_items = size_t(*max);
    return HttpResponse::json(200, ctx.queue.history_json(max_items, query_int(req, "offset")));
  });
  r.add("GET", "/history/{prompt_id}",
        [&ctx](const HttpRequest&, const std::vector<std::string>& p) {
          return HttpResponse::json(200, ctx.queue.history_get(p[0]));
        });
  r.add("POST", "/history", [&ctx](const HttpRequest& req, auto&) {
    return post_clear_delete(
        req, [&] { ctx.queue.history_clear(); },
        [&](const std::vector<std::string>& ids) { ctx.queue.history_delete(ids); });
  });
  r.add("POST", "/interrupt", [&ctx](const HttpRequest& req, auto&) {
    Result<Json> body = request_json(req, Json::object());
    std::string id;
    if (body.ok() && body->is_object() && body->contains("prompt_id") &&
        (*body)["prompt_id"].is_string())
      id = (*body)["prompt_id"];
    ctx.runner.interrupt(id);
    return HttpResponse::text(200, "");
  });
  r.add("POST", "/free", [&ctx](const HttpRequest& req, auto&) {
    Result<Json> body = request_json(req, Json::object());
    if (!body.ok() || !body->is_object()) return HttpResponse::error(400, "expected a JSON object");
    ctx.runner.request_free(body->value("unload_models", false) == true,
                            body->value("free_memory", false) == true);
    return HttpResponse::text(200, "");
  });
}

}  // namespace hr
