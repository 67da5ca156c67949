// `headroom probe`: the devices headroom can use, and what the GPU really offers
// (diagnose/probe.h).
#include <cstdio>
#include <fstream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/bytes.h"
#include "diagnose/probe.h"
#include "memory/budget.h"
#include "memory/device_profile_cache.h"

namespace hr {
namespace {

bool file_write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return bool(f);
}

Result<ProbeOptions> probe_options(const ProbeArgs& a) {
  ProbeOptions o;
  if (a.block_mib <= 0) return Status(ErrorCode::INVALID_ARGUMENT, "--block-mib must be > 0");
  if (a.bandwidth_mib <= 0)
    return Status(ErrorCode::INVALID_ARGUMENT, "--bandwidth-mib must be > 0");
  if (!(a.fraction >= 0 && a.fraction <= 1))
    return Status(ErrorCode::INVALID_ARGUMENT, "--fraction must be in [0, 1]");
  o.block_bytes = uint64_t(a.block_mib) << 20;
  o.bandwidth_bytes = uint64_t(a.bandwidth_mib) << 20;
  o.fraction = a.fraction;
  // Note [pinned budget]: the move to host memory is bounded like streamed weights are.
  MemoryArgs m;
  m.pinned_budget = a.pinned_budget;
  m.vram_budget = "100%";  // unused here; keeps a nearly full host from making it zero
  HR_ASSIGN_OR_RETURN(MemoryPolicy p, memory_policy_resolve(m, cpu_backend_create(1)->info()));
  o.pinned_budget = p.pinned_budget;
  return o;
}

}  // namespace

int cmd_probe(const ProbeArgs& a) {
  Result<ProbeOptions> o = probe_options(a);
  if (!o.ok()) {
    std::fprintf(stderr, "headroom probe: %s\n", o.status().message().c_str());
    return 2;
  }
  ProbeReport report;
  Result<std::unique_ptr<Backend>> cuda = cuda_backend_create(a.device);
  if (cuda.ok()) {
    Backend& b = **cuda;
    if (!a.json)
      std::fprintf(stderr,
                   "headroom probe: filling %s with %d MiB blocks until allocation fails...\n",
                   b.info().name.c_str(), a.block_mib);
    Result<ProbeReport> r = probe_device(b, DriverLens::open(b), *o);
    if (!r.ok()) {
      std::fprintf(stderr, "headroom probe: %s\n", r.status().str().c_str());
      return 3;
    }
    report = std::move(r).value();
    probe_profile(report, b, device_profile_path(b.info().name));  // refreshes the cache
  } else {
    report = probe_host(*o);
    report.no_gpu_reason = cuda.status().message();
    probe_profile(report, *cpu_backend_create(), "");  // Note [device profile cache]
  }
  if (a.json) {
    std::printf("%s\n", probe_json(report).dump(2).c_str());
  } else {
    std::printf("%s", probe_format(report).c_str());
  }
  if (!a.plot.empty()) {
    if (!file_write(a.plot, probe_plot(report))) {
      std::fprintf(stderr, "headroom probe: cannot write %s\n", a.plot.c_str());
      return 3;
    }
    if (!a.json) std::printf("chart written to %s\n", a.plot.c_str());
  }
  return 0;
}

}  // namespace hr
