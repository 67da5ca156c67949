// ComfyUI's queue routes: /prompt, /queue, /history, /interrupt, /free.
#include <optional>

#include "core/json_parse.h"
#include "jobs/job_service.h"
#include "server/routes.h"
#include "workflow/prompt.h"

namespace hr {

Result<Json> request_json(const HttpRequest& req, std::optional<Json> empty_as) {
  if (req.body.empty() && empty_as) return *empty_as;
  Result<Json> j = json_parse(req.body);
  if (!j.ok()) return j.status().with_context("the request body");
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

// The shared queue store cannot be reached (Redis down): 503, and nothing was changed.
HttpResponse unavailable(const Status& st) {
  return HttpResponse::json(503, Json{{"error",
                                       {{"type", "queue_unavailable"},
                                        {"message", st.message()},
                                        {"details", st.str()},
                                        {"extra_info", Json::object()}}},
                                      {"node_errors", Json::object()}});
}

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
  if (!body.ok())
    return prompt_error("invalid_prompt", "Invalid prompt: " + body.status().message());
  if (!body->is_object())
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
  Result<Job> job = ctx.jobs.submit(std::move(s));
  if (!job.ok() && job.status().code() == ErrorCode::IO) return unavailable(job.status());
  if (!job.ok()) return prompt_error("invalid_prompt", job.status().message());
  return HttpResponse::json(200, Json{{"prompt_id", job->prompt_id},
                                      {"number", job->number},
                                      {"node_errors", Json::object()}});
}

// POST /queue and POST /history: {clear: true} and/or {delete: [prompt_id, ...]}.
HttpResponse post_clear_delete(const HttpRequest& req, const std::function<Status()>& clear,
                               const std::function<Status(const std::vector<std::string>&)>& del) {
  Result<Json> body = request_json(req, Json::object());
  if (!body.ok()) return HttpResponse::error(400, body.status().message());
  if (!body->is_object()) return HttpResponse::error(400, "expected a JSON object");
  Status st;
  if (body->value("clear", false) == true) st = clear();
  if (st.ok() && body->contains("delete")) st = del(string_list((*body)["delete"]));
  return st.ok() ? HttpResponse::text(200, "") : unavailable(st);
}

HttpResponse json_or_unavailable(const Result<Json>& r) {
  return r.ok() ? HttpResponse::json(200, *r) : unavailable(r.status());
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
    Result<size_t> n = ctx.jobs.remaining();
    if (!n.ok()) return unavailable(n.status());
    return HttpResponse::json(200, Json{{"exec_info", {{"queue_remaining", *n}}}});
  });
  r.add("GET", "/queue", [&ctx](const HttpRequest&, auto&) {
    return json_or_unavailable(ctx.jobs.queue_json());
  });
  r.add("POST", "/queue", [&ctx](const HttpRequest& req, auto&) {
    return post_clear_delete(
        req, [&] { return ctx.jobs.pending_clear(); },
        [&](const std::vector<std::string>& ids) { return ctx.jobs.pending_delete(ids); });
  });
  r.add("GET", "/history", [&ctx](const HttpRequest& req, auto&) {
    std::optional<int64_t> max = query_int(req, "max_items");
    std::optional<size_t> max_items;
    if (max && *max >= 0) max_items = size_t(*max);
    return json_or_unavailable(ctx.jobs.history_json(max_items, query_int(req, "offset")));
  });
  r.add("GET", "/history/{prompt_id}",
        [&ctx](const HttpRequest&, const std::vector<std::string>& p) {
          return json_or_unavailable(ctx.jobs.history_get(p[0]));
        });
  r.add("POST", "/history", [&ctx](const HttpRequest& req, auto&) {
    return post_clear_delete(
        req, [&] { return ctx.jobs.history_clear(); },
        [&](const std::vector<std::string>& ids) { return ctx.jobs.history_delete(ids); });
  });
  r.add("POST", "/interrupt", [&ctx](const HttpRequest& req, auto&) {
    Result<Json> body = request_json(req, Json::object());
    if (!body.ok()) return HttpResponse::error(400, body.status().message());
    std::string id;
    if (body->is_object() && body->contains("prompt_id") && (*body)["prompt_id"].is_string())
      id = (*body)["prompt_id"];
    Status st = ctx.jobs.interrupt(id);
    return st.ok() ? HttpResponse::text(200, "") : unavailable(st);
  });
  r.add("POST", "/free", [&ctx](const HttpRequest& req, auto&) {
    Result<Json> body = request_json(req, Json::object());
    if (!body.ok()) return HttpResponse::error(400, body.status().message());
    if (!body->is_object()) return HttpResponse::error(400, "expected a JSON object");
    Status st = ctx.jobs.request_free(body->value("unload_models", false) == true,
                                      body->value("free_memory", false) == true);
    return st.ok() ? HttpResponse::text(200, "") : unavailable(st);
  });
}

}  // namespace hr
