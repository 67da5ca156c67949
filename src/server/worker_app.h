// `headroom worker`: one device's job runner fed by the Redis Streams queue (jobs/
// redis_job_source.h), publishing ComfyUI's messages and vram_update to every front, with a
// heartbeat record that fronts list in /system_stats and /metrics (docs/DISTRIBUTED.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "memory/budget.h"

namespace hr {

struct WorkerOptions {
  std::string queue_url;  // redis://HOST:PORT/DB
  std::string name;       // the worker id; empty: <host>-<pid>-<device>
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;
  std::string output_dir = "output";  // shared by every worker and front
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  std::string device = "cpu";  // cpu, cuda, cuda:N
  std::string dtype = "auto";
  int threads = 0;
  MemoryArgs memory;
  std::string preview_method = "none";
  double warning = 0.8, danger = 0.9;
  std::chrono::milliseconds lease{10000};  // Note [redis job lifecycle]
  int max_deliveries = 3;
  std::chrono::milliseconds heartbeat{1000};
  int vram_busy_ms = 250, vram_idle_ms = 1000;
  std::string crash_marker;  // RedisWorkerOptions::crash_marker (tests)
};

class WorkerApp {
 public:
  static Result<std::unique_ptr<WorkerApp>> start(const WorkerOptions& options);
  WorkerApp(const WorkerApp&) = delete;
  WorkerApp& operator=(const WorkerApp&) = delete;
  ~WorkerApp();
  // Finishes (or puts back) the running job, deregisters, stops every thread.
  void stop();
  std::string describe() const;

  struct Parts;

 private:
  explicit WorkerApp(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> p_;
};

}  // namespace hr
