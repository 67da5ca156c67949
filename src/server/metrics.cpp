// metrics_text: one gauge or counter per line, with # HELP and # TYPE.
#include "server/metrics.h"

#include "graph/executor.h"

#include <fmt/format.h>

#include "backend/allocator.h"
#include "jobs/job_service.h"
#include "memory/telemetry.h"
#include "server/ws_hub.h"

namespace hr {
namespace {

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void value(const std::string& name, double v, const std::string& labels = "") {
    out_ += labels.empty() ? fmt::format("{} {}\n", name, v)
                           : fmt::format("{}{{{}}} {}\n", name, labels, v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

void vram_metrics(Exposition& e, ServerContext& ctx) {
  const TelemetrySample s = ctx.telemetry.latest();
  e.family("headroom_vram_bytes", "gauge",
           "Device memory by lens (allocator, driver) and segment.");
  const AllocatorSegments& a = s.allocator;
  for (const auto& [seg, v] : {std::pair{"context", a.context},
                               {"weights", a.weights},
                               {"activations", a.activations},
                               {"staging", a.staging},
                               {"other", a.other},
                               {"total", a.total}})
    e.value("headroom_vram_bytes", double(v),
            fmt::format("lens=\"allocator\",segment=\"{}\"", seg));
  for (const auto& [seg, v] : {std::pair{"used", s.driver.used},
                               {"total", s.driver.total},
                               {"this_process", s.driver.this_process},
                               {"other_processes", s.driver.other_processes}})
    e.value("headroom_vram_bytes", double(v), fmt::format("lens=\"driver\",segment=\"{}\"", seg));
  e.family("headroom_vram_budget_bytes", "gauge",
           "Allocator-level budget (absent when unlimited).");
  if (ctx.allocator.budget() != Allocator::kUnlimited)
    e.value("headroom_vram_budget_bytes", double(ctx.allocator.budget()));
  e.family("headroom_allocation_failures_total", "counter",
           "Allocations refused by the budget or the device.");
  e.value("headroom_allocation_failures_total", double(ctx.allocator.total().failures));
  e.family("headroom_reclaimed_bytes_total", "counter", "Bytes freed by reclaiming idle weights.");
  e.value("headroom_reclaimed_bytes_total", double(ctx.allocator.reclaimed()));
  const PoolStats w = ctx.allocator.stats(Pool::WEIGHTS);
  e.family("headroom_weight_cache_bytes", "gauge",
           "Idle cached weight blocks, part of the allocator-level weights segment.");
  e.value("headroom_weight_cache_bytes", double(w.cached));
  e.family("headroom_weight_blocks_reused_total", "counter",
           "Weights placed in a cached block instead of a new device allocation.");
  e.value("headroom_weight_blocks_reused_total", double(w.reused));
}

void step_histogram(Exposition& e, const StepHistogram& h) {
  e.family("headroom_step_seconds", "histogram", "Sampler step latency.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < StepHistogram::kBounds.size(); ++i) {
    cumulative += h.counts[i];
    e.value("headroom_step_seconds_bucket", double(cumulative),
            fmt::format("le=\"{}\"", StepHistogram::kBounds[i]));
  }
  e.value("headroom_step_seconds_bucket", double(h.count), "le=\"+Inf\"");
  e.value("headroom_step_seconds_sum", h.sum);
  e.value("headroom_step_seconds_count", double(h.count));
}

double or_zero(const Result<size_t>& n) { return n.ok() ? double(*n) : 0; }

// Note [metrics across workers]: with `serve --queue` the queue gauges are the shared queue's,
// the job counters are summed over the live workers' heartbeats, and every worker's device gets
// its own headroom_worker_* series; this front's own device and allocator series stay (it plans).
void worker_metrics(Exposition& e, const Json& workers) {
  e.family("headroom_workers", "gauge", "Live workers (heartbeat not expired).");
  e.value("headroom_workers", double(workers.size()));
  e.family("headroom_worker_vram_bytes", "gauge",
           "Each worker's device memory: driver total and free, allocator held and budget.");
  for (const Json& w : workers) {
    const Json& d = w.value("device", Json::object());
    const std::string labels = fmt::format("worker=\"{}\",device=\"{}\"", w.value("id", ""),
                                           d.value("name", ""));
    for (const char* key : {"vram_total", "vram_free", "torch_vram_total", "torch_vram_free"})
      if (d.contains(key) && d[key].is_number())
        e.value("headroom_worker_vram_bytes", d[key].get<double>(),
                labels + fmt::format(",value=\"{}\"", key));
  }
  e.family("headroom_worker_busy", "gauge", "1 while the worker runs a job.");
  for (const Json& w : workers)
    e.value("headroom_worker_busy", w.value("running", Json()).is_string() ? 1 : 0,
            fmt::format("worker=\"{}\"", w.value("id", "")));
}

}  // namespace

std::string metrics_text(ServerContext& ctx) {
  Exposition e;
  e.family("headroom_queue_pending", "gauge", "Jobs waiting to run.");
  e.value("headroom_queue_pending", or_zero(ctx.jobs.pending_count()));
  e.family("headroom_queue_running", "gauge", "Jobs running (0 or 1 per worker).");
  e.value("headroom_queue_running", or_zero(ctx.jobs.running_count()));
  e.family("headroom_queue_held", "gauge",
           "1 while pending jobs wait for memory in use to fall below the danger level.");
  e.value("headroom_queue_held", ctx.jobs.held() ? 1 : 0);
  e.family("headroom_history_entries", "gauge", "Finished jobs kept in history.");
  e.value("headroom_history_entries", or_zero(ctx.jobs.history_count()));
  if (Json workers = ctx.jobs.workers(); workers.is_array()) worker_metrics(e, workers);
  const JobStatsSnapshot js = ctx.jobs.stats();
  e.family("headroom_jobs_total", "counter", "Finished jobs by outcome since the server started.");
  for (size_t i = 0; i < js.outcomes.size(); ++i)
    e.value("headroom_jobs_total", double(js.outcomes[i]),
            fmt::format("outcome=\"{}\"", job_outcome_name(JobOutcome(i))));
  e.family("headroom_oom_failures_total", "counter",
           "Jobs that failed out of memory after recovery.");
  e.value("headroom_oom_failures_total", double(js.oom_failures));
  if (ctx.executor) {  // Note [streamed execution], Note [OOM recovery] in memory/oom_recovery.cpp
    e.family("headroom_streamed_bytes_total", "counter",
             "Weight bytes copied into the staging ring (weight streaming).");
    e.value("headroom_streamed_bytes_total", double(ctx.executor->streamed_total()));
    e.family("headroom_oom_recoveries_total", "counter",
             "Model calls that recovered from a refused allocation by planning again.");
    e.value("headroom_oom_recoveries_total", double(ctx.executor->recoveries()));
  }
  vram_metrics(e, ctx);
  e.family("headroom_websocket_clients", "gauge", "Connected WebSocket clients.");
  e.value("headroom_websocket_clients", double(ctx.hub.clients()));
  e.family("headroom_websocket_dropped_total", "counter", "Clients dropped for a full send queue.");
  e.value("headroom_websocket_dropped_total", double(ctx.hub.dropped()));
  step_histogram(e, js.steps);
  return e.take();
}

}  // namespace hr
