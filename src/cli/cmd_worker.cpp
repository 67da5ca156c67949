// `headroom worker`: runs jobs from the Redis Streams queue on one device until SIGINT or
// SIGTERM (server/worker_app.h); its options and the command.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "jobs/redis_client.h"
#include "server/worker_app.h"

namespace hr {

void add_memory_options(CLI::App& cmd, MemoryArgs& m);  // main.cpp

CLI::App* worker_command_add(CLI::App& app, WorkerArgs& a) {
  CLI::App* c = app.add_subcommand(
      "worker", "run jobs queued by `headroom serve --queue` fronts on one device");
  c->add_option("--queue", a.queue, "redis://HOST:PORT/DB of the fronts' queue")->required();
  c->add_option("--device", a.device, "cpu, cuda or cuda:N (one worker per GPU)");
  c->add_option("--name", a.name, "worker id (default: <host>-<pid>-<device>)");
  c->add_option("--models-dir", a.models_dir, "models folder (ComfyUI layout)");
  c->add_option("--extra-model-paths-config", a.extra_model_paths,
                "extra_model_paths.yaml (ComfyUI's format); repeatable")
      ->allow_extra_args(false);
  c->add_option("--output-dir", a.output_dir, "where SaveImage writes: the fronts' --output-dir");
  c->add_option("--input-dir", a.input_dir, "where LoadImage reads: the fronts' --input-dir");
  c->add_option("--temp-dir", a.temp_dir, "where PreviewImage writes: the fronts' --temp-dir");
  c->add_option("--dtype", a.dtype, "compute dtype: auto, f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  c->add_option("--threads", a.threads, "CPU threads (0: all)");
  c->add_option("--clip-tokenizer", a.clip_tokenizer,
                "folder with the CLIP vocab.json and merges.txt");
  c->add_option("--preview-method", a.preview_method, "none, auto or latent2rgb")
      ->check(CLI::IsMember({"none", "auto", "latent2rgb"}));
  c->add_option("--lease", a.lease_s,
                "seconds without this worker's heartbeat after which its job runs elsewhere")
      ->check(CLI::Range(0.5, 3600.0));
  c->add_option("--max-deliveries", a.max_deliveries,
                "a job delivered more often (its workers died) goes to the dead-letter stream")
      ->check(CLI::Range(1, 1000));
  c->add_option("--vram-warning", a.vram_warning_pct, "as serve's (default 80)")
      ->check(CLI::Range(1.0, 100.0));
  c->add_option("--vram-danger", a.vram_danger_pct, "as serve's (default 90)")
      ->check(CLI::Range(1.0, 100.0));
  add_memory_options(*c, a.memory);
  return c;
}

int cmd_worker(const WorkerArgs& a) {
  if (!redis_available()) {
    std::fprintf(stderr,
                 "headroom worker: this headroom was built without hiredis: install "
                 "libhiredis-dev (.ci/install-deps) and build again\n");
    return kExitFailed;
  }
  if (!a.clip_tokenizer.empty()) setenv("HEADROOM_CLIP_TOKENIZER", a.clip_tokenizer.c_str(), 1);
  WorkerOptions o;
  o.queue_url = a.queue;
  o.name = a.name;
  o.models_dir = a.models_dir;
  o.extra_model_paths = a.extra_model_paths;
  o.output_dir = a.output_dir;
  o.input_dir = a.input_dir;
  o.temp_dir = a.temp_dir;
  o.device = a.device;
  o.dtype = a.dtype;
  o.threads = a.threads;
  o.memory = a.memory;
  o.preview_method = a.preview_method;
  o.warning = a.vram_warning_pct / 100.0;
  o.danger = a.vram_danger_pct / 100.0;
  o.lease = std::chrono::milliseconds(int64_t(a.lease_s * 1000));
  o.max_deliveries = a.max_deliveries;
  if (const char* m = std::getenv("HEADROOM_WORKER_CRASH_ON")) o.crash_marker = m;

  const sigset_t set = stop_signals_block();  // Note [signals before threads]
  Result<std::unique_ptr<WorkerApp>> app = WorkerApp::start(o);
  if (!app.ok()) {
    std::fprintf(stderr, "headroom worker: %s\n", app.status().str().c_str());
    return kExitFailed;
  }
  std::fprintf(stderr, "headroom worker: %s\n", (*app)->describe().c_str());
  const int sig = stop_signal_wait(set);
  std::fprintf(stderr, "headroom worker: stopping (signal %d)\n", sig);
  (*app)->stop();
  return kExitOk;
}

}  // namespace hr
