// `headroom serve` under load, on the CPU with the tiny checkpoint: requests per second of
// POST /prompt (invalid, and valid queued) and GET /history from N client threads over loopback,
// against GET /prompt as the baseline route; and the per-job overhead of the server (HTTP,
// queue, admission, WebSocket, SQLite) over running the same workflow in-process with
// PromptExecutor, measured in the same run.
// Usage: bench_server [CLIENTS=8] [SECONDS_PER_ROUTE=2] [JOBS=10]
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "nodes/nodes.h"
#include "server/serve_app.h"
#include "server/server_client.h"
#include "workflow/execute.h"

namespace hr::bench {
namespace {

using test::HttpResult;
using test::Json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Requests per second of `call` (true: the expected answer) from `clients` threads.
double rps_measure(int clients, double seconds, const std::function<bool()>& call,
                   int* wrong) {
  std::atomic<long> done{0}, bad{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> th;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c)
    th.emplace_back([&] {
      while (!stop) (call() ? done : bad)++;
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& t : th) t.join();
  *wrong = int(bad.load());
  return double(done.load()) / (ms_since(start) / 1000.0);
}

// The same workflow in-process: what `headroom run` does per job, without a server.
struct InProcess {
  std::unique_ptr<Backend> backend = cpu_backend_create(1);
  Allocator allocator{*backend, Allocator::kUnlimited, eviction_policy()};
  Executor executor{*backend, allocator, executor_policies_default(*backend)};
  NodeRegistry registry;
  PromptExecutor prompts;
  std::map<std::string, std::shared_ptr<void>> resources;
  ExecOptions opts;

  InProcess(const fs::path& dir, const std::string& models) {
    NodeEnv env{models, (dir / "in-input").string(), nullptr};
    nodes_register(registry, env);
    opts.models_dir = models;
    opts.output_dir = (dir / "in-output").string();
    opts.input_dir = env.input_dir;
    opts.temp_dir = (dir / "in-temp").string();
    opts.backend = backend.get();
    opts.allocator = &allocator;
    opts.executor = &executor;
    opts.resources = &resources;
    for (const std::string& d : {opts.output_dir, opts.input_dir, opts.temp_dir})
      fs::create_directories(d);
  }
  // Milliseconds for one job (validation included, as the server validates too).
  double run(const Json& wf) {
    const auto t = Clock::now();
    PromptValidation v = prompt_validate(wf, registry);
    if (!v.ok) std::fprintf(stderr, "invalid: %s\n", v.summary().c_str());
    Result<ExecResult> r = prompts.execute(v.prompt, opts);
    if (!r.ok()) std::fprintf(stderr, "in-process run failed: %s\n", r.status().str().c_str());
    return ms_since(t);
  }
};

// Milliseconds from POST /prompt to `executing` with node null, one job at a time.
double server_job(uint16_t port, test::WsReader& ws, const Json& wf) {
  const auto t = Clock::now();
  HttpResult r = test::http_post_json(port, "/prompt", Json{{"prompt", wf}, {"client_id", "bench"}});
  if (r.status != 200 || !ws.until_done(r.json()["prompt_id"]))
    std::fprintf(stderr, "server job failed: %d %s\n", r.status, r.body.c_str());
  return ms_since(t);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

int run(int clients, double seconds, int jobs) {
  omp_set_num_threads(1);
  const fs::path dir = fs::temp_directory_path() / fmt::format("hr_bench_srv_{}", ::getpid());
  fs::remove_all(dir);
  const std::string models = test::models_folder_make(dir).string();
  ServeOptions o;
  o.server.port = 0;
  o.server.output_dir = (dir / "output").string();
  o.server.input_dir = (dir / "input").string();
  o.server.temp_dir = (dir / "temp").string();
  o.models_dir = models;
  o.device = "cpu";
  o.threads = 1;
  o.database = (dir / "jobs.sqlite").string();
  Result<std::unique_ptr<ServeApp>> app = ServeApp::start(o);
  if (!app.ok()) {
    std::fprintf(stderr, "bench_server: %s\n", app.status().str().c_str());
    return 1;
  }
  const uint16_t port = (*app)->port();

  // Per-job overhead: the same seeds in both, each a real sampler run (new seed), after one
  // warm-up each that loads the model.
  InProcess local(dir, models);
  test::WsReader ws;
  if (!ws.connect(port, "bench")) return 1;
  local.run(test::tiny_workflow(64, 1, 1));
  server_job(port, ws, test::tiny_workflow(64, 1, 1));
  std::vector<double> t_local, t_server;
  for (int i = 0; i < jobs; ++i) {
    t_local.push_back(local.run(test::tiny_workflow(64, 1, 10 + i)));
    t_server.push_back(server_job(port, ws, test::tiny_workflow(64, 1, 10 + i)));
  }
  // A fully cached job (the same prompt again): the server's cost with almost no compute.
  std::vector<double> c_local, c_server;
  for (int i = 0; i < jobs; ++i) {
    c_local.push_back(local.run(test::tiny_workflow(64, 1, 10 + jobs - 1)));
    c_server.push_back(server_job(port, ws, test::tiny_workflow(64, 1, 10 + jobs - 1)));
  }

  Json bad = test::tiny_workflow();
  bad["3"]["inputs"]["sampler_name"] = "nope";
  const std::string bad_body = Json{{"prompt", bad}}.dump();
  const std::string ok_body = Json{{"prompt", test::tiny_workflow(64, 1, 10 + jobs - 1)}}.dump();
  struct Row {
    const char* name;
    std::function<bool()> call;
    double rps = 0;
    int wrong = 0;
  };
  std::vector<Row> rows = {
      {"GET /prompt (baseline)", [&] { return test::http_call(port, "GET", "/prompt").status == 200; }},
      {"POST /prompt invalid (400)",
       [&] { return test::http_call(port, "POST", "/prompt", bad_body).status == 400; }},
      {"POST /prompt valid (queued)",
       [&] { return test::http_call(port, "POST", "/prompt", ok_body).status == 200; }},
      {"GET /history (under load)",
       [&] { return test::http_call(port, "GET", "/history?max_items=64").status == 200; }},
  };
  for (Row& r : rows) r.rps = rps_measure(clients, seconds, r.call, &r.wrong);
  const size_t history = test::http_call(port, "GET", "/history").json().size();
  test::http_post_json(port, "/queue", Json{{"clear", true}});

  std::printf("\nbench_server: CPU, tiny SD1 checkpoint 64x64, 1 step; %d client threads, %.1f s "
              "per route; history holds %zu entries\n\n",
              clients, seconds, history);
  std::printf("| route | req/s | ratio to baseline | wrong answers |\n|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.0f | %.2fx | %d |\n", r.name, r.rps, r.rps / rows[0].rps, r.wrong);
  std::printf("\n| job (%d runs, mean) | in-process PromptExecutor ms | server ms | overhead ms | "
              "ratio |\n|---|---|---|---|---|\n",
              jobs);
  const double a = mean(t_local), b = mean(t_server), ca = mean(c_local), cb = mean(c_server);
  std::printf("| new seed (sampler + VAE run) | %.1f | %.1f | %.1f | %.2fx |\n", a, b, b - a, b / a);
  std::printf("| same prompt (output cache) | %.1f | %.1f | %.1f | %.2fx |\n", ca, cb, cb - ca,
              cb / ca);
  (*app)->stop();
  fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace hr::bench

int main(int argc, char** argv) {
  const int clients = argc > 1 ? std::atoi(argv[1]) : 8;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  const int jobs = argc > 3 ? std::atoi(argv[3]) : 10;
  return hr::bench::run(clients, seconds, jobs);
}
