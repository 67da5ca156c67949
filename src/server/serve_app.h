// `headroom serve` assembled: backend, budgeted allocator, telemetry, node registry, the
// persistent queue and its worker, WebSocket hub, routes and listener, started and stopped in
// order. Used by the command and, in-process, by the server tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "memory/budget.h"
#include "server/server_config.h"

namespace hr {

class Allocator;

struct ServeOptions {
  ServerConfig server;
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;
  std::string device = "auto";  // auto, cpu, cuda
  std::string dtype = "auto";   // auto (f16 on cuda, f32 on cpu), f32, f16, bf16
  int threads = 0;              // CPU threads (0: all)
  MemoryArgs memory;
  // The SQLite file of the queue and history; ":memory:" keeps them in memory only.
  std::string database = "headroom-jobs.sqlite";
  // `--queue redis://HOST:PORT/DB`: jobs go to Redis Streams and run in `headroom worker`
  // processes (docs/DISTRIBUTED.md); empty: the queue and its worker are in this process.
  std::string queue_url;
  // ComfyUI's --preview-method: none, auto or latent2rgb (binary preview frames per step).
  std::string preview_method = "none";
};

class ServeApp {
 public:
  // Builds everything and starts listening; the error names what failed (bad flags, a
  // database that cannot be opened, an address in use).
  static Result<std::unique_ptr<ServeApp>> start(const ServeOptions& options);
  ServeApp(const ServeApp&) = delete;
  ServeApp& operator=(const ServeApp&) = delete;
  ~ServeApp();

  uint16_t port() const;
  // The allocator the jobs use (tests hold memory in it to see the danger level act).
  Allocator& allocator();
  // One line for the log: address, device, dtype, budget and where it came from.
  std::string describe() const;
  void stop();

  struct Parts;  // everything it owns (serve_app.cpp)

 private:
  explicit ServeApp(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> p_;
};

}  // namespace hr
