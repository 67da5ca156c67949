// WorkerApp: the compute stack of `serve` (backend, budgeted allocator, executor, telemetry) with
// a RedisJobSource instead of the in-process queue, events to Redis, a heartbeat and control.
#include "server/worker_app.h"

#include <omp.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/backend_open.h"
#include "core/bytes.h"
#include "core/signal_stack.h"
#include "graph/executor.h"
#include "jobs/job_runner.h"
#include "jobs/redis_client.h"
#include "jobs/redis_events.h"
#include "jobs/redis_job_source.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_subscriber.h"
#include "jobs/redis_wire.h"
#include "jobs/vram_class.h"
#include "memory/driver_lens.h"
#include "memory/telemetry.h"
#include "sampling/latent_preview.h"
#include "models/model_paths.h"
#include "nodes/nodes.h"
#include "server/compute_stack.h"
#include "server/device_stats.h"
#include "server/vram_feed.h"

namespace hr {

// The compute stack is the base: built first, destroyed after everything that runs on it.
struct WorkerApp::Parts : ComputeStack {
  WorkerOptions opt;
  ServerConfig config;  // the vram feed's periods and levels
  std::string id;
  RedisUrl url;
  std::shared_ptr<const ModelPaths> model_paths;
  NodeRegistry registry;
  std::shared_ptr<RedisClient> redis;
  std::unique_ptr<RedisJobSource> source;
  std::unique_ptr<JobRunner> runner;
  std::unique_ptr<RedisSubscriber> control;
  std::unique_ptr<VramFeed> feed;
  int64_t started_ms = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread heartbeat;
};

namespace {

std::string worker_id_default(const std::string& device) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}-{}-{}", host, ::getpid(), device);
}

Status compute_setup(WorkerApp::Parts& p) {
  return compute_stack_open(
      ComputeChoice{p.opt.device, p.opt.threads, p.opt.dtype, p.opt.preview_method, p.opt.memory},
      p);
}

RuntimeFolders folders_of(const WorkerOptions& o) {
  return RuntimeFolders{o.models_dir, o.output_dir, o.input_dir, o.temp_dir};
}

JobRuntime runtime_make(WorkerApp::Parts& p) {
  return compute_runtime(p, p.registry, p.model_paths, folders_of(p.opt), p.opt.threads);
}

// The heartbeat record fronts list (docs/DISTRIBUTED.md, "worker:<id>").
Json heartbeat_json(WorkerApp::Parts& p) {
  const std::string running = p.source->running_id();
  const std::vector<uint64_t> classes = vram_classes_upto(p.policy.budget);
  return Json{{"id", p.id},
              {"pid", ::getpid()},
              {"device", device_stats_json(*p.backend, *p.allocator, *p.telemetry)},
              {"budget", p.policy.budget == UINT64_MAX ? Json(nullptr) : Json(p.policy.budget)},
              {"vram_class", classes.empty() ? Json(nullptr) : Json(vram_class_name(classes[0]))},
              {"running", running.empty() ? Json(nullptr) : Json(running)},
              {"held", p.runner->held()},
              {"stats", job_stats_json(p.runner->stats())},
              {"loaded_models", p.runner->loaded_models()},
              {"started_ms", p.started_ms},
              {"time_ms", message_timestamp_ms()}};
}

void heartbeat_loop(WorkerApp::Parts& p) {
  const auto ttl = std::max<int64_t>(3 * p.opt.heartbeat.count(), 3000);
  std::unique_lock<std::mutex> lock(p.mu);
  while (!p.stopping) {
    lock.unlock();
    p.source->lease_renew();
    (void)p.redis->pipeline({{"SET", redis_keys::worker(p.id), heartbeat_json(p).dump(), "PX",
                              std::to_string(ttl)},
                             {"SADD", redis_keys::kWorkers, p.id}});
    lock.lock();
    p.cv.wait_for(lock, p.opt.heartbeat, [&] { return p.stopping; });
  }
}

void control_apply(WorkerApp::Parts& p, const std::string& payload) {
  Result<ControlMessage> c = control_decode(payload);
  if (!c.ok()) return;
  if (c->op == "interrupt") p.runner->interrupt(c->prompt_id);
  if (c->op == "free") p.runner->request_free(c->unload_models, c->free_memory);
  if (c->op == "wake") p.source->wake();
  if (c->op == "vram" && p.feed) p.feed->resend();
}

Status queue_setup(WorkerApp::Parts& p) {
  HR_ASSIGN_OR_RETURN(p.url, redis_url_parse(p.opt.queue_url));
  HR_ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> redis, RedisClient::connect(p.url));
  p.redis = std::move(redis);
  RedisWorkerOptions wo;
  wo.worker_id = p.id;
  wo.budget = p.policy.budget;
  wo.lease = p.opt.lease;
  wo.max_deliveries = p.opt.max_deliveries;
  wo.crash_marker = p.opt.crash_marker;
  HR_ASSIGN_OR_RETURN(p.source, RedisJobSource::open(p.redis, wo));
  JobMessageSink sink = redis_event_sink(p.redis, p.id);
  p.source->set_sink(sink);
  p.runner = std::make_unique<JobRunner>(*p.source, runtime_make(p), sink);
  p.control = std::make_unique<RedisSubscriber>(
      p.url, std::vector<std::string>{redis_keys::kControl},
      [&p](const std::string&, const std::string& payload) { control_apply(p, payload); });
  const std::string device = p.backend->info().name;
  p.feed = std::make_unique<VramFeed>(
      *p.telemetry, p.config, p.levels, p.policy.budget, [&p] { return p.runner->busy(); },
      [&p, sink, device](const Json& d) {
        Json data = d;
        data["worker"] = p.id;  // one chart per worker device
        data["device"] = device;
        sink(JobMessage{"vram_update", std::move(data), ""});
      });
  return Status();
}

}  // namespace

WorkerApp::WorkerApp(std::unique_ptr<Parts> parts) : p_(std::move(parts)) {}

Result<std::unique_ptr<WorkerApp>> WorkerApp::start(const WorkerOptions& options) {
  auto p = std::make_unique<Parts>();
  p->opt = options;
  p->id = options.name.empty() ? worker_id_default(options.device) : options.name;
  p->config.vram_busy_ms = options.vram_busy_ms;
  p->config.vram_idle_ms = options.vram_idle_ms;
  HR_TRY(runtime_folders_prepare(folders_of(options), options.extra_model_paths, p->model_paths,
                                 p->registry));
  HR_TRY(p->levels.set(options.warning, options.danger).with_context("--vram-warning/--vram-danger"));
  HR_TRY(compute_setup(*p));
  HR_TRY(queue_setup(*p));
  p->started_ms = message_timestamp_ms();
  p->telemetry->start();
  p->control->start();
  p->feed->start();
  p->runner->start();
  Parts& parts = *p;
  p->heartbeat = std::thread([&parts] {
    signal_stack_install();
    heartbeat_loop(parts);
  });
  return std::unique_ptr<WorkerApp>(new WorkerApp(std::move(p)));
}

WorkerApp::~WorkerApp() { stop(); }

std::string WorkerApp::describe() const {
  const std::vector<std::string>& s = p_->source->streams();
  return fmt::format("worker {} on {} in {} (budget {} ({}); queue {}: {} streams, {} down to {})",
                     p_->id, p_->backend->info().name, dtype_name(p_->dtype),
                     bytes_format(p_->policy.budget), p_->policy.how, p_->url.str(), s.size(),
                     s.size() > 1 ? s[s.size() / 2] : s.front(), s.back());
}

void WorkerApp::stop() {
  if (!p_ || !p_->runner) return;
  p_->runner->stop();  // an interrupted job goes back to its stream (RedisJobSource::release)
  p_->feed->stop();
  p_->control->stop();
  {
    std::lock_guard<std::mutex> lock(p_->mu);
    p_->stopping = true;
  }
  p_->cv.notify_all();
  if (p_->heartbeat.joinable()) p_->heartbeat.join();
  (void)p_->redis->pipeline(
      {{"DEL", redis_keys::worker(p_->id)}, {"SREM", redis_keys::kWorkers, p_->id}});
  p_->telemetry->stop();
  p_->runner.reset();
}

}  // namespace hr
