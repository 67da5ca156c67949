// The server's settings (`headroom serve` flags) and the state every route handler reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workflow/workflow_plan.h"

namespace hr {

class Executor;

class Allocator;
class Backend;
class JobService;
class MemoryLevels;
class ModelPaths;
class NodeRegistry;
class Telemetry;
class WsHub;

struct ServerConfig {
  std::string listen = "127.0.0.1";  // ComfyUI's default: local clients only
  uint16_t port = 8188;              // 0: any free port (tests)
  std::string output_dir = "output";
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  size_t max_upload_bytes = 64ull << 20;  // /upload/* bodies
  size_t max_body_bytes = 16ull << 20;    // every other body (JSON)
  size_t ws_queue_frames = 1024;          // Note [bounded send queues]
  int io_threads = 2;
  int vram_busy_ms = 250;              // vram_update period while a job runs
  int vram_idle_ms = 1000;             // check period when idle (sent only on change)
  // The warning and danger levels at start, fractions of the budget (--vram-warning,
  // --vram-danger); POST /headroom/levels changes the live ones (ServerContext::levels).
  double warning = 0.8, danger = 0.9;
  std::vector<std::string> argv;       // for /system_stats
  // The dashboard's built files (web/dist, --web-root); empty: web_root_find() (web_root.h).
  std::string web_root;
};

// What route handlers use; everything outlives the server.
struct ServerContext {
  const ServerConfig& config;
  JobService& jobs;  // the queue and its workers, here or behind Redis (jobs/job_service.h)
  const NodeRegistry& registry;
  std::shared_ptr<const ModelPaths> model_paths;
  Backend& backend;
  Allocator& allocator;
  Telemetry& telemetry;
  WorkflowPlanOptions plan;  // as the worker plans (budget: the allocator's)
  WsHub& hub;
  MemoryLevels& levels;
  uint64_t budget;  // the server's budget (a job may run with a lower one: Note [warning level])
  const Executor* executor = nullptr;  // the worker's: bytes streamed, OOM recoveries
};

}  // namespace hr
