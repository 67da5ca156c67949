// headroom's own routes: GET /metrics, GET /headroom/memory, POST /headroom/plan.
#include "backend/allocator.h"
#include "jobs/job_runner.h"
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
              {"allocations", p.allocations}, {"failures", p.failures}};
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
      {"now", vram_json(ctx.telemetry.latest(), ctx.config)},
      {"peaks", {{"allocator_total", peaks.allocator.total}, {"driver_used", peaks.driver.used}}},
      {"context_overhead", ctx.telemetry.context_overhead()},
      {"loaded_models", ctx.runner.loaded_models()}};
  return HttpResponse::json(200, out);
}

// The workflow plan of a prompt ({"prompt": {...}} as POST /prompt takes, or the bare
// workflow), without queueing it.
HttpResponse post_plan(ServerContext& ctx, const HttpRequest& req) {
  Result<Json> body = request_json(req);
  if (!body.ok() || !body->is_object())
    return prompt_error("invalid_prompt", "Invalid prompt: the body is not a JSON object");
  const Json& wf = body->contains("prompt") ? (*body)["prompt"] : *body;
  PromptValidation v = prompt_validate(wf, ctx.registry);
  if (!v.ok) return HttpResponse::json(400, v.error);
  WorkflowPlanOptions o = ctx.plan;
  o.budget = ctx.allocator.budget();
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
  r.add("POST", "/headroom/plan",
        [&ctx](const HttpRequest& req, auto&) { return post_plan(ctx, req); });
}

}  // namespace hr
