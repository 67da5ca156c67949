// GET /metrics: the server's state in Prometheus text format (queue depth, jobs by outcome, VRAM
// by lens and segment, OOM failures, WebSocket clients, sampler step latency histogram).
#pragma once

#include <string>

#include "server/server_config.h"

namespace hr {

std::string metrics_text(ServerContext& ctx);

}  // namespace hr
