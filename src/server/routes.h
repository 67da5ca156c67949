// The route families of the server; each adds its routes to the Router.
#pragma once

#include <optional>

#include "core/status.h"
#include "server/http_types.h"
#include "server/router.h"
#include "server/server_config.h"

namespace hr {

// POST/GET /prompt, GET/POST /queue, GET/POST /history, GET /history/{id}, POST /interrupt, /free.
void routes_add_queue(Router& r, ServerContext& ctx);
// GET /view, POST /upload/image, POST /upload/mask.
void routes_add_files(Router& r, ServerContext& ctx);
// GET /object_info(/{class}), /system_stats, /models(/{folder}), /embeddings, /extensions,
// /features.
void routes_add_info(Router& r, ServerContext& ctx);
// GET /metrics, GET /headroom/memory, POST /headroom/plan, GET/POST /headroom/levels.
void routes_add_headroom(Router& r, ServerContext& ctx);
// GET / and /headroom/ (the dashboard's index.html) and /headroom/assets/{file}, from
// ServerConfig::web_root (Note [dashboard at the root] in routes_static.cpp). Add it last.
void routes_add_static(Router& r, ServerContext& ctx);

// The request body as JSON; an empty body is `empty_as` when given, else an error.
Result<Json> request_json(const HttpRequest& req, std::optional<Json> empty_as = std::nullopt);
// ComfyUI's 400 body for a prompt that cannot be queued: {error: {type, message, details,
// extra_info}, node_errors: {}}.
HttpResponse prompt_error(const std::string& type, const std::string& message,
                          const std::string& details = "");

}  // namespace hr
