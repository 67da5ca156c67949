// device_stats_json from the latest telemetry sample (taken now when there is none yet).
#include "server/device_stats.h"

#include <algorithm>

#include "backend/allocator.h"
#include "backend/device.h"
#include "memory/telemetry.h"

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

}  // namespace

// Note [system_stats lenses]: ComfyUI fills vram_* from the driver and torch_vram_* from
// PyTorch's caching allocator. headroom fills vram_* from its driver-level lens and torch_vram_*
// from its allocator-level lens: torch_vram_total is what the allocator holds and
// torch_vram_free what it may still allocate within the budget. The `headroom` block names them.
Json device_stats_json(const BackendDevice& device, const Allocator& allocator,
                       Telemetry& telemetry) {
  const DeviceInfo info = device.info();
  const TelemetrySample s = telemetry_now(telemetry);
  const uint64_t held = allocator.total().current, budget = allocator.budget();
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

}  // namespace hr
