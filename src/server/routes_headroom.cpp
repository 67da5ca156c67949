// headroom's own routes: GET /metrics, GET /headroom/memory, POST /headroom/plan, GET and
// POST /headroom/levels.
#include "backend/allocator.h"
#include "core/bytes.h"
#include "jobs/job_service.h"
#include "jobs/memory_levels.h"
#include "memory/telemetry.h"
#include "server/metrics.h"
#include "server/routes.h"
#include "server/vram_feed.h"
#include "workflow/prompt.h"
#include "workflow/workflow_plan.h"

namespace hr {
namespace {

Json pool_json(const PoolStats& p) {
  return Json{{"current", p.current},         {"peak", p.peak},
              {"allocated", p.allocated},     {"freed", p.freed},
              {"allocations", p.allocations}, {"failures", p.failures},
              {"cached", p.cached},           {"reused", p.reused}};
}

// The warning and danger levels as fractions and, with a budget, in bytes.
Json levels_json(const ServerContext& ctx) {
  const double w = ctx.levels.warning(), d = ctx.levels.danger();
  const bool limited = ctx.budget != Allocator::kUnlimited;
  return Json{{"warning", w},
              {"danger", d},
              {"warning_bytes", limited ? Json(MemoryLevels::level_bytes(ctx.budget, w)) : Json()},
              {"danger_bytes", limited ? Json(MemoryLevels::level_bytes(ctx.budget, d)) : Json()}};
}

// {"warning": 0.8, "danger": 0.9}; either may be left out (it keeps its value).
// Note [levels per worker]: behind `--queue` the levels that act are each worker's own
// (`headroom worker --vram-warning/--vram-danger`, drawn on its chart); a front's would change
// nothing, so setting them there is refused rather than silently ignored.
HttpResponse post_levels(ServerContext& ctx, const HttpRequest& req) {
  if (!ctx.jobs.workers().is_null())
    return HttpResponse::error(409, "the warning and danger levels are set per worker "
                                    "(headroom worker --vram-warning/--vram-danger)");
  Result<Json> body = request_json(req);
  if (!body.ok()) return HttpResponse::error(400, body.status().message());
  if (!body->is_object())
    return HttpResponse::error(400, "expected a JSON object {\"warning\": 0.8, \"danger\": 0.9}");
  double w = ctx.levels.warning(), d = ctx.levels.danger();
  for (auto [key, value] : {std::pair{"warning", &w}, std::pair{"danger", &d}}) {
    if (!body->contains(key)) continue;
    const Json& v = (*body)[key];
    if (!v.is_number()) return HttpResponse::error(400, std::string(key) + " must be a number");
    *value = v.get<double>();
  }
  Status st = ctx.levels.set(w, d);
  if (!st.ok()) return HttpResponse::error(400, st.message());
  return HttpResponse::json(200, levels_json(ctx));
}

// Accounting per pool (allocator level), the driver lens, the run's peaks, loaded models.
HttpResponse get_memory(ServerContext& ctx) {
  Json pools = Json::object();
  for (size_t i = 0; i < size_t(Pool::COUNT_); ++i)
    pools[pool_name(Pool(i))] = pool_json(ctx.allocator.stats(Pool(i)));
  const Allocator& a = ctx.allocator;
  const TelemetryPeaks peaks = ctx.telemetry.peaks();
  Json out = {
      {"allocator",
       {{"pools", pools},
        {"total", pool_json(a.total())},
        {"budget", a.budget() == Allocator::kUnlimited ? Json(nullptr) : Json(a.budget())},
        {"weights_cap", a.weights_cap() == UINT64_MAX ? Json(nullptr) : Json(a.weights_cap())},
        {"reclaimed", a.reclaimed()}}},
      {"now", vram_json(ctx.telemetry.latest(), ctx.levels, ctx.budget)},
      {"levels", levels_json(ctx)},
      {"queue_held", ctx.jobs.held()},
      {"peaks", {{"allocator_total", peaks.allocator.total}, {"driver_used", peaks.driver.used}}},
      {"context_overhead", ctx.telemetry.context_overhead()},
      {"loaded_models", ctx.jobs.loaded_models()}};
  if (Json w = ctx.jobs.workers(); !w.is_null()) out["workers"] = std::move(w);
  return HttpResponse::json(200, out);
}

// The optional "budget" of a plan request: bytes as a number or a size such as "6GiB"; null or
// absent: the server's budget (not a job's lowered one, Note [warning level]).
Result<uint64_t> plan_budget(const ServerContext& ctx, const Json& body) {
  if (!body.contains("budget") || body["budget"].is_null()) return ctx.budget;
  const Json& b = body["budget"];
  if (b.is_number() && b.get<double>() > 0) return uint64_t(b.get<double>());
  if (b.is_string()) return bytes_parse(b.get<std::string>());
  return make_error(ErrorCode::INVALID_ARGUMENT,
                    "budget must be a positive number of bytes or a size such as \"6GiB\"");
}

// The workflow plan of a prompt ({"prompt": {...}} as POST /prompt takes, optionally with a
// "budget", or the bare workflow), without queueing it.
HttpResponse post_plan(ServerContext& ctx, const HttpRequest& req) {
  Result<Json> body = request_json(req);
  if (!body.ok())
    return prompt_error("invalid_prompt", "Invalid prompt: " + body.status().message());
  if (!body->is_object())
    return prompt_error("invalid_prompt", "Invalid prompt: the body is not a JSON object");
  const bool wrapped = body->contains("prompt");
  const Json& wf = wrapped ? (*body)["prompt"] : *body;
  Result<uint64_t> budget = wrapped ? plan_budget(ctx, *body) : Result<uint64_t>(ctx.budget);
  if (!budget.ok()) return HttpResponse::error(400, budget.status().message());
  PromptValidation v = prompt_validate(wf, ctx.registry);
  if (!v.ok) return HttpResponse::json(400, v.error);
  WorkflowPlanOptions o = ctx.plan;
  o.budget = *budget;
  Result<WorkflowPlan> plan = workflow_plan(v.prompt, o);
  if (!plan.ok()) return HttpResponse::error(422, plan.status().str());
  return HttpResponse::json(200, workflow_plan_json(*plan));
}

}  // namespace

void routes_add_headroom(Router& r, ServerContext& ctx) {
  r.add("GET", "/metrics", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::text(200, metrics_text(ctx), "text/plain; version=0.0.4; charset=utf-8");
  });
  r.add("GET", "/headroom/memory", [&ctx](const HttpRequest&, auto&) { return get_memory(ctx); });
  // Remote workers' heartbeat records (`serve --queue`); [] when jobs run in this process.
  r.add("GET", "/headroom/workers", [&ctx](const HttpRequest&, auto&) {
    Json w = ctx.jobs.workers();
    return HttpResponse::json(200, w.is_null() ? Json::array() : w);
  });
  r.add("GET", "/headroom/levels",
        [&ctx](const HttpRequest&, auto&) { return HttpResponse::json(200, levels_json(ctx)); });
  r.add("POST", "/headroom/levels",
        [&ctx](const HttpRequest& req, auto&) { return post_levels(ctx, req); });
  r.add("POST", "/headroom/plan",
        [&ctx](const HttpRequest& req, auto&) { return post_plan(ctx, req); });
}

}  // namespace hr
