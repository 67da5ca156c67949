// ComfyUI's informational routes: /object_info from the node registry, /system_stats from
// both memory lenses, and the model folder listings.
#include <sys/utsname.h>

#include "jobs/job_service.h"
#include "memory/telemetry.h"
#include "models/model_paths.h"
#include "server/device_stats.h"
#include "server/routes.h"
#include "workflow/node_def.h"

#ifndef HEADROOM_VERSION
#define HEADROOM_VERSION "0.1.0"
#endif

namespace hr {
namespace {

HttpResponse system_stats(ServerContext& ctx) {
  std::unique_ptr<DriverLens> host = driver_lens_host();
  const DriverSample ram = host->sample();
  utsname u{};
  ::uname(&u);
  Json system = {{"os", std::string(u.sysname) == "Linux" ? "posix" : u.sysname},
                 {"ram_total", ram.total},
                 {"ram_free", ram.total - std::min(ram.used, ram.total)},
                 {"comfyui_version", std::string("headroom ") + HEADROOM_VERSION},
                 {"python_version", ""},
                 {"pytorch_version", ""},
                 {"embedded_python", false},
                 {"argv", ctx.config.argv}};
  // With `serve --queue` the devices are the live workers' (Note [metrics across workers]).
  Json devices = Json::array();
  if (Json workers = ctx.jobs.workers(); workers.is_array()) {
    for (const Json& w : workers) {
      Json d = w.value("device", Json::object());
      d["headroom"]["worker"] = w.value("id", "");
      devices.push_back(std::move(d));
    }
  } else {
    devices.push_back(device_stats_json(ctx.backend, ctx.allocator, ctx.telemetry));
  }
  return HttpResponse::json(200, Json{{"system", system}, {"devices", devices}});
}

// Embedding names without their extension, as ComfyUI lists them.
Json embeddings(const ModelPaths& mp) {
  Json out = Json::array();
  for (const std::string& f : mp.files("embeddings")) {
    const size_t dot = f.rfind('.');
    out.push_back(dot == std::string::npos ? f : f.substr(0, dot));
  }
  return out;
}

}  // namespace

void routes_add_info(Router& r, ServerContext& ctx) {
  r.add("GET", "/object_info", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::json(200, ctx.registry.object_info());
  });
  r.add("GET", "/object_info/{class}",
        [&ctx](const HttpRequest&, const std::vector<std::string>& p) {
          const NodeDef* d = ctx.registry.find(p[0]);
          return HttpResponse::json(
              200, d ? Json{{p[0], ctx.registry.object_info(*d)}} : Json::object());
        });
  r.add("GET", "/system_stats", [&ctx](const HttpRequest&, auto&) { return system_stats(ctx); });
  r.add("GET", "/models", [&ctx](const HttpRequest&, auto&) {
    Json out = Json::array();
    for (const auto& [folder, dirs] : ctx.model_paths->folders()) out.push_back(folder);
    return HttpResponse::json(200, out);
  });
  r.add("GET", "/models/{folder}", [&ctx](const HttpRequest&, const std::vector<std::string>& p) {
    if (ctx.model_paths->folder_dirs(p[0]).empty())
      return HttpResponse::error(404, "no model folder " + p[0]);
    return HttpResponse::json(200, Json(ctx.model_paths->files(p[0])));
  });
  r.add("GET", "/embeddings", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::json(200, embeddings(*ctx.model_paths));
  });
  r.add("GET", "/extensions",
        [](const HttpRequest&, auto&) { return HttpResponse::json(200, Json::array()); });
  r.add("GET", "/features", [&ctx](const HttpRequest&, auto&) {
    return HttpResponse::json(200, Json{{"supports_preview_metadata", false},
                                        {"max_upload_size", ctx.config.max_upload_bytes}});
  });
}

}  // namespace hr
