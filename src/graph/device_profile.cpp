// A device profile's check and text; the fallback figures and the clock built from a profile
// are memory policy (memory/residency_clock.cpp).
#include "graph/device_profile.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace hr {

namespace {

bool rate_ok(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

bool DeviceProfile::valid() const {
  return rate_ok(gemm_flops_per_s) && rate_ok(attention_flops_per_s) &&
         rate_ok(memory_bytes_per_s) && rate_ok(copy_bytes_per_s) && std::isfinite(node_s) &&
         node_s >= 0;
}

std::string device_profile_describe(const DeviceProfile& p) {
  // TFLOP/s for a GPU, GFLOP/s for a CPU.
  auto flops = [](double x) {
    return x >= 1e12 ? fmt::format("{:.1f} TFLOP/s", x / 1e12) : fmt::format("{:.1f} GFLOP/s", x / 1e9);
  };
  return fmt::format(
      "{}: GEMM {}, attention {}, memory {:.1f} GB/s, {:.2f} us per op, host to device {:.1f} "
      "GB/s{}",
      p.device, flops(p.gemm_flops_per_s), flops(p.attention_flops_per_s),
      p.memory_bytes_per_s / 1e9, p.node_s * 1e6, p.copy_bytes_per_s / 1e9,
      p.measured ? "" : " (default)");
}

}  // namespace hr
