// One device as ComfyUI's /system_stats lists it (vram_* from the driver-level lens,
// torch_vram_* from the allocator-level lens); the server and each `headroom worker` heartbeat
// build it the same way.
#pragma once

#include <nlohmann/json.hpp>

namespace hr {

using Json = nlohmann::json;
class Allocator;
class BackendDevice;
class Telemetry;

Json device_stats_json(const BackendDevice& device, const Allocator& allocator,
                       Telemetry& telemetry);

}  // namespace hr
