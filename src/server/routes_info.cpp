// ComfyUI's informational routes: /object_info from the node registry, /system_stats from
// both memory lenses, and the model folder listings.
#include <sys/utsname.h>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "memory/telemetry.h"
#include "nodes/model_paths.h"
#include "server/routes.h"
#include "workflow/node_def.h"

#ifndef HEADROOM_VERSION
#define HEADROOM_VERSION "0.1.0"
#endif

namespace hr {
namespace {

TelemetrySample telemetry_now(Telemetry& t) {
  TelemetrySample s = t.latest();
  if (s.seq == 0) {
    t.sample_now();
    s = t.latest();
  }
  return s;
}

// Note [system_stats lenses]: ComfyUI fills vram_* from the driver and torch_vram_* from
// PyTorch's caching allocator. headroom fills vram_* from its driver-level lens and torch_vram_*
// from its allocator-level lens: torch_vram_total is what the allocator holds and
// torch_vram_free what it may still allocate within the budget. The `headroom` block names them.
Json device_json(ServerContext& ctx) {
  const DeviceInfo info = ctx.backend.info();
  const TelemetrySample s = telemetry_now(ctx.telemetry);
  const uint64_t held = ctx.allocator.total().current, budget = ctx.allocator.budget();
  const uint64_t vram_total = s.driver.total ? s.driver.total : info.memory_total;
  const uint64_t vram_free =
      s.driver.total ? s.driver.total - std::min(s.driver.used, s.driver.total) : info.memory_free;
  const uint64_t within =
      budget == Allocator::kUnlimited ? vram_free : (budget > held ? budget - held : 0);
  return Json{{"name", info.name},
              {"type", info.kind},
              {"index", info.index},
              {"vram_total", vram_total},
              {"vram_free", vram_free},
              {"torch_vram_total", held},
              {"torch_vram_free", within},
              {"headroom",
               {{"vram_lens", "driver: " + s.driver.source},
                {"torch_vram_lens", "allocator: bytes held / room left in the budget"},
                {"budget", budget == Allocator::kUnlimited ? Json(nullptr) : Json(budget)}}}};
}

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
  return HttpResponse::json(200,
                            Json{{"system", system}, {"devices", Json::array({device_json(ctx)})}});
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
