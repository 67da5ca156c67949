// ServeApp: construction in dependency order; stop in reverse (listener, feed, worker).
#include "server/serve_app.h"

#include <omp.h>

#include <filesystem>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/backend_open.h"
#include "core/bytes.h"
#include "graph/executor.h"
#include "jobs/job_queue.h"
#include "jobs/job_runner.h"
#include "jobs/job_service.h"
#include "jobs/redis_job_service.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_subscriber.h"
#include "jobs/redis_wire.h"
#include "jobs/sqlite_store.h"
#include "memory/device_profile_cache.h"
#include "memory/driver_lens.h"
#include "memory/telemetry.h"
#include "sampling/latent_preview.h"
#include "models/model_paths.h"
#include "nodes/nodes.h"
#include "server/compute_stack.h"
#include "server/http_listener.h"
#include "server/routes.h"
#include "server/vram_feed.h"
#include "server/worker_vram.h"
#include "server/ws_hub.h"

namespace hr {

// The compute stack is the base: it is built first and destroyed last, after everything that
// runs on it.
struct ServeApp::Parts : ComputeStack {
  ServeOptions opt;
  std::shared_ptr<const ModelPaths> model_paths;
  NodeRegistry registry;
  std::unique_ptr<JobQueue> queue;
  WsHub hub;
  std::unique_ptr<JobRunner> runner;
  std::unique_ptr<JobService> jobs;
  WorkerVramLatest worker_vram;              // `--queue`: Note [latest per worker]
  std::unique_ptr<RedisSubscriber> events;  // `--queue`: the workers' messages for this hub
  std::unique_ptr<ServerContext> ctx;
  Router router;
  std::unique_ptr<HttpListener> listener;
  std::unique_ptr<VramFeed> feed;
};

namespace {

RuntimeFolders folders_of(const ServeOptions& o) {
  return RuntimeFolders{o.models_dir, o.server.output_dir, o.server.input_dir, o.server.temp_dir};
}

Status compute_setup(ServeApp::Parts& p) {
  return compute_stack_open(
      ComputeChoice{p.opt.device, p.opt.threads, p.opt.dtype, p.opt.preview_method, p.opt.memory},
      p);
}

Status queue_setup(ServeApp::Parts& p) {
  std::unique_ptr<JobStore> store;
  if (p.opt.database == ":memory:") {
    store = job_store_memory();
  } else {
    HR_ASSIGN_OR_RETURN(store, job_store_sqlite(p.opt.database));
  }
  p.queue = std::make_unique<JobQueue>(std::move(store));
  HR_TRY(p.queue->open());
  JobRuntime rt = compute_runtime(p, p.registry, p.model_paths, folders_of(p.opt), p.opt.threads);
  WsHub& hub = p.hub;
  p.runner = std::make_unique<JobRunner>(*p.queue, std::move(rt), [&hub](const JobMessage& m) {
    if (m.binary)
      hub.send_binary(m.client_id, m.binary);
    else
      hub.send(m.client_id, m.type, m.data);
  });
  JobQueue& q = *p.queue;
  q.set_on_change([&hub, &q] { hub.send("", "status", msg_status(q.remaining())); });
  p.jobs = job_service_local(*p.queue, *p.runner);
  return Status();
}

WorkflowPlanOptions plan_options(const ServeApp::Parts& p) {
  WorkflowPlanOptions plan;
  plan.backend = p.backend.get();
  plan.compute_dtype = p.dtype;
  plan.dtype_auto = p.dtype_auto;
  plan.models_dir = p.opt.models_dir;
  plan.model_paths = p.model_paths;
  plan.input_dir = p.opt.server.input_dir;
  plan.device_profile = device_profile_load(*p.backend);  // once, not a cache read per plan
  return plan;
}

// Note [front forwarding]: with `--queue` this process runs no jobs. Workers publish every
// message once; every front receives it and hands it to its WsHub, which delivers it to the
// connections of its client_id (or to all for an empty one), so a client gets its messages from
// whichever front its WebSocket is on, whichever front queued its prompt.
void events_forward(WsHub& hub, WorkerVramLatest& latest, const std::string& channel,
                    const std::string& payload) {
  const bool binary = channel == redis_keys::kPreviews;
  Result<JobMessage> m = binary ? preview_decode(payload) : event_decode(payload);
  if (!m.ok()) {
    std::fprintf(stderr, "headroom serve: dropping a message: %s\n", m.status().str().c_str());
  } else if (binary) {
    hub.send_binary(m->client_id, m->binary);
  } else {
    if (m->type == "vram_update") latest.put(m->data);
    hub.send(m->client_id, m->type, m->data);
  }
}

// Note [latest per worker]: after (re)subscribing, ask the idle workers for their latest; on a
// join, resend those of the live ones (one heartbeat read, as /queue does, on the I/O thread).
void worker_vram_resend(ServeApp::Parts& p, RedisJobService* service) {
  p.events->set_on_subscribed([service] { (void)service->vram_resend_request(); });
  p.hub.set_on_join([&hub = p.hub, &latest = p.worker_vram, service](const std::string& client) {
    for (const Json& d : latest.live(service->workers())) hub.send(client, "vram_update", d);
  });
}

Status queue_setup_remote(ServeApp::Parts& p) {
  HR_ASSIGN_OR_RETURN(RedisUrl url, redis_url_parse(p.opt.queue_url));
  HR_ASSIGN_OR_RETURN(std::unique_ptr<RedisJobService> jobs,
                      RedisJobService::open(url, p.registry, plan_options(p)));
  RedisJobService* service = jobs.get();
  p.jobs = std::move(jobs);
  WsHub& hub = p.hub;
  WorkerVramLatest& latest = p.worker_vram;
  p.events = std::make_unique<RedisSubscriber>(
      url, std::vector<std::string>{redis_keys::kEvents, redis_keys::kPreviews},
      [&hub, &latest](const std::string& channel, const std::string& payload) {
        events_forward(hub, latest, channel, payload);
      });
  worker_vram_resend(p, service);
  return Status();
}

Status server_setup(ServeApp::Parts& p) {
  p.ctx.reset(new ServerContext{p.opt.server, *p.jobs, p.registry, p.model_paths, *p.backend,
                                *p.allocator, *p.telemetry, plan_options(p), p.hub, p.levels,
                                p.policy.budget, p.executor.get()});
  routes_add_queue(p.router, *p.ctx);
  routes_add_files(p.router, *p.ctx);
  routes_add_info(p.router, *p.ctx);
  routes_add_headroom(p.router, *p.ctx);
  routes_add_static(p.router, *p.ctx);  // last: Note [dashboard at the root]
  JobService& jobs = *p.jobs;
  p.listener = std::make_unique<HttpListener>(p.opt.server, p.router, p.hub, [&jobs] {
    Result<size_t> n = jobs.remaining();
    return n.ok() ? *n : 0;
  });
  if (!p.runner) return Status();  // `--queue`: vram_update comes from the workers
  JobRunner& runner = *p.runner;
  WsHub& hub = p.hub;
  p.feed = std::make_unique<VramFeed>(
      *p.telemetry, p.opt.server, p.levels, p.policy.budget, [&runner] { return runner.busy(); },
      [&hub](const Json& d) { hub.send("", "vram_update", d); });
  hub.set_on_join([feed = p.feed.get()](const std::string&) { feed->resend(); });
  return Status();
}

}  // namespace

namespace {

// The database, or the Redis URL without its password.
std::string queue_describe(const ServeOptions& o) {
  if (o.queue_url.empty()) return o.database;
  Result<RedisUrl> u = redis_url_parse(o.queue_url);
  return (u.ok() ? u->str() : o.queue_url) + " (jobs run in workers)";
}

}  // namespace

ServeApp::ServeApp(std::unique_ptr<Parts> parts) : p_(std::move(parts)) {}

Result<std::unique_ptr<ServeApp>> ServeApp::start(const ServeOptions& options) {
  auto p = std::make_unique<Parts>();
  p->opt = options;
  HR_TRY(runtime_folders_prepare(folders_of(options), options.extra_model_paths, p->model_paths,
                                 p->registry));
  HR_TRY(p->levels.set(options.server.warning, options.server.danger)
             .with_context("--vram-warning/--vram-danger"));
  HR_TRY(compute_setup(*p));
  HR_TRY(options.queue_url.empty() ? queue_setup(*p) : queue_setup_remote(*p));
  HR_TRY(server_setup(*p));
  HR_TRY(p->listener->start());
  p->telemetry->start();
  if (p->runner) p->runner->start();
  if (p->feed) p->feed->start();
  if (p->events) p->events->start();
  return std::unique_ptr<ServeApp>(new ServeApp(std::move(p)));
}

ServeApp::~ServeApp() { stop(); }

uint16_t ServeApp::port() const { return p_->listener->port(); }

Allocator& ServeApp::allocator() { return *p_->allocator; }

std::string ServeApp::describe() const {
  return fmt::format("listening on http://{}:{} ({} in {}; budget {} ({}), residency {}; queue {})",
                     p_->opt.server.listen, port(), p_->backend->info().name, dtype_name(p_->dtype),
                     bytes_format(p_->policy.budget), p_->policy.how,
                     residency_mode_name(p_->policy.mode),
                     queue_describe(p_->opt));
}

void ServeApp::stop() {
  if (!p_) return;
  p_->listener->stop();
  if (p_->events) p_->events->stop();
  if (p_->feed) p_->feed->stop();
  if (p_->runner) p_->runner->stop();
  p_->hub.clear();  // sessions die with their I/O context (destroyed with the listener)
  if (p_->queue) p_->queue->close();
  p_->telemetry->stop();
}

}  // namespace hr
