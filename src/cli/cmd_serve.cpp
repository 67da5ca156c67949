// `headroom serve`: the ComfyUI-compatible server (server/serve_app.h) until SIGINT or SIGTERM.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "server/serve_app.h"
#include "server/web_root.h"

namespace hr {
namespace {

// Where the dashboard is, or why it is not there (Note [dashboard at the root]).
std::string dashboard_line(const ServerConfig& c, uint16_t port) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(c.web_root) / "index.html", ec))
    return "dashboard not built (no index.html in " + c.web_root +
           "): run `npm ci && npm run build` in web/";
  return "dashboard at http://" + c.listen + ":" + std::to_string(port) +
         "/headroom/ (files from " + c.web_root + ")";
}

}  // namespace

int cmd_serve(const ServeArgs& a) {
  if (!a.clip_tokenizer.empty()) setenv("HEADROOM_CLIP_TOKENIZER", a.clip_tokenizer.c_str(), 1);
  ServeOptions o;
  o.server.listen = a.listen;
  o.server.port = uint16_t(a.port);
  o.server.output_dir = a.output_dir;
  o.server.input_dir = a.input_dir;
  o.server.temp_dir = a.temp_dir;
  o.server.max_upload_bytes = size_t(a.max_upload_mb * 1024 * 1024);
  o.server.warning = a.vram_warning_pct / 100.0;
  o.server.danger = a.vram_danger_pct / 100.0;
  o.server.argv = a.argv;
  o.models_dir = a.models_dir;
  o.extra_model_paths = a.extra_model_paths;
  o.device = a.device;
  o.dtype = a.dtype;
  o.threads = a.threads;
  o.memory = a.memory;
  o.database = a.database;
  o.queue_url = a.queue;
  o.server.web_root = a.web_root.empty() ? web_root_find() : a.web_root;
  o.preview_method = a.preview_method;

  const sigset_t set = stop_signals_block();  // Note [signals before threads]

  Result<std::unique_ptr<ServeApp>> app = ServeApp::start(o);
  if (!app.ok()) {
    std::fprintf(stderr, "headroom serve: %s\n", app.status().str().c_str());
    return kExitFailed;
  }
  std::fprintf(stderr, "headroom serve: %s\n", (*app)->describe().c_str());
  std::fprintf(stderr, "headroom serve: %s\n", dashboard_line(o.server, (*app)->port()).c_str());
  const int sig = stop_signal_wait(set);
  std::fprintf(stderr, "headroom serve: stopping (signal %d)\n", sig);
  (*app)->stop();
  return kExitOk;
}

}  // namespace hr
