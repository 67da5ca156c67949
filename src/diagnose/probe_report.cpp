// The probe's report: JSON, text and chart. Every byte count names its lens.
#include <fmt/format.h>

#include "core/bytes.h"
#include "diagnose/chart.h"
#include "diagnose/probe.h"

namespace hr {
namespace {

Json transfer_json(const Transfer& t) {
  return {{"bytes", t.bytes}, {"seconds", t.seconds}, {"gb_per_s", t.gbps()}};
}

Json driver_json(const DriverSample& d) {
  Json j = {{"used", d.used}, {"total", d.total}, {"per_process", d.per_process}};
  if (d.per_process) {
    j["this_process"] = d.this_process;
    j["other_processes"] = d.other_processes;
  }
  return j;
}

std::string transfer_text(const Transfer& t) {
  if (t.seconds <= 0) return "not measured";
  return fmt::format("{} in {:.3f} s = {:.2f} GB/s", bytes_format(t.bytes), t.seconds, t.gbps());
}

std::string host_text(const ProbeReport& r) {
  return fmt::format(
      "host RAM (driver level, /proc): {} total, {} used\n"
      "host memory bandwidth (memcpy, {} reps): {:.2f} GB/s\n",
      bytes_format(r.host_ram_total), bytes_format(r.host_ram_used), r.host_memcpy_reps_gbps.size(),
      r.host_memcpy.gbps());
}

Json profile_json(const ProbeReport& r) {
  const DeviceProfile& p = r.profile;
  Json j = {{"device", p.device},
            {"measured", p.measured},
            {"gemm_flops_per_s", p.gemm_flops_per_s},
            {"attention_flops_per_s", p.attention_flops_per_s},
            {"memory_bytes_per_s", p.memory_bytes_per_s},
            {"node_s", p.node_s},
            {"copy_bytes_per_s", p.copy_bytes_per_s},
            {"cache", r.profile_path.empty() ? Json(nullptr) : Json(r.profile_path)}};
  if (!r.profile_error.empty()) j["error"] = r.profile_error;
  return j;
}

std::string profile_text(const ProbeReport& r) {
  if (r.profile.device.empty()) return "";
  std::string s = "device profile (what the residency planner plans with): " +
                  device_profile_describe(r.profile) + "\n";
  if (!r.profile_error.empty()) s += "  not measured or not cached: " + r.profile_error + "\n";
  if (!r.profile_path.empty()) s += "  written to " + r.profile_path + "\n";
  else if (r.profile.measured && r.profile_error.empty())
    s += "  not cached: the CPU plans with its fixed profile\n";
  return s;
}

std::string others_text(const ProbeReport& r) {
  if (!r.per_process) return "not measured (the driver-level source has no per-process figures)";
  return fmt::format("{} at start, {} at the fullest sample", bytes_format(r.others_at_start),
                     bytes_format(r.others_at_peak));
}

std::string device_text(const ProbeReport& r) {
  std::string s = fmt::format("device {}: {} (driver level, {})\n", r.device,
                              bytes_format(r.device_total), r.driver_source);
  s += fmt::format("CUDA context (driver level, this process before any allocation): {}\n",
                   r.per_process ? bytes_format(r.context_bytes) : std::string("not measured"));
  s += fmt::format("other processes (driver level): {}\n", others_text(r));
  s += fmt::format("copies (blocking, {} buffer):\n", bytes_format(r.bandwidth_bytes));
  s += fmt::format("  host->device pinned   {}\n  device->host pinned   {}\n",
                   transfer_text(r.h2d_pinned), transfer_text(r.d2h_pinned));
  s += fmt::format("  host->device pageable {}\n  device->host pageable {}\n",
                   transfer_text(r.h2d_pageable), transfer_text(r.d2h_pageable));
  s += fmt::format("fill: {} blocks of {} until allocation failed ({})\n", r.blocks,
                   bytes_format(r.block_bytes), r.fill_stop);
  s += fmt::format("  allocator level: {} held\n", bytes_format(r.filled_allocator));
  s += fmt::format("  driver level: {} used of {}{}\n", bytes_format(r.at_full.used),
                   bytes_format(r.at_full.total),
                   r.at_full.per_process
                       ? fmt::format(" ({} this process)", bytes_format(r.at_full.this_process))
                       : std::string());
  s += fmt::format("move {} blocks to pinned host memory: {}{}\n", r.blocks_moved,
                   transfer_text(r.move),
                   r.move_stop.empty() ? "" : " (stopped: " + r.move_stop + ")");
  s += fmt::format(
      "  freed: {} (allocator level), {} (driver level)\n", bytes_format(r.freed_allocator),
      r.freed_driver >= 0 ? bytes_format(uint64_t(r.freed_driver))
                          : fmt::format("-{}", bytes_format(uint64_t(-r.freed_driver))));
  s += fmt::format("swap back {} blocks: {}{}\n", r.blocks_back, transfer_text(r.swap_back),
                   r.back_stop.empty() ? "" : " (stopped: " + r.back_stop + ")");
  s += fmt::format("driver-level peak during the probe: {} used{}\n",
                   bytes_format(r.driver_peak.used),
                   r.driver_peak.per_process
                       ? fmt::format(" ({} this process)", bytes_format(r.driver_peak.this_process))
                       : std::string());
  return s;
}

ChartSeries timeline_series(const ProbeReport& r, const char* name,
                            uint64_t (*value)(const TelemetrySample&)) {
  ChartSeries s;
  s.name = name;
  for (const TelemetrySample& t : r.timeline)
    s.points.emplace_back(t.time_ms / 1000.0, double(value(t)) / double(1ull << 30));
  return s;
}

}  // namespace

Json probe_json(const ProbeReport& r) {
  Json j;
  j["gpu"] = r.gpu;
  j["host"] = {{"ram_total", r.host_ram_total},
               {"ram_used", r.host_ram_used},
               {"memcpy", transfer_json(r.host_memcpy)},
               {"memcpy_reps_gb_per_s", r.host_memcpy_reps_gbps}};
  if (!r.profile.device.empty()) j["profile"] = profile_json(r);
  if (!r.gpu) {
    j["no_gpu_reason"] = r.no_gpu_reason;
    return j;
  }
  j["device"] = r.device;
  j["driver_source"] = r.driver_source;
  j["device_total"] = r.device_total;
  j["context_bytes"] = r.per_process ? Json(r.context_bytes) : Json(nullptr);
  j["other_processes"] = r.per_process
                             ? Json{{"at_start", r.others_at_start}, {"at_peak", r.others_at_peak}}
                             : Json(nullptr);
  j["bandwidth"] = {{"h2d_pinned", transfer_json(r.h2d_pinned)},
                    {"d2h_pinned", transfer_json(r.d2h_pinned)},
                    {"h2d_pageable", transfer_json(r.h2d_pageable)},
                    {"d2h_pageable", transfer_json(r.d2h_pageable)}};
  j["fill"] = {{"block_bytes", r.block_bytes},
               {"blocks", r.blocks},
               {"stopped_by", r.fill_stop},
               {"allocator_level_bytes", r.filled_allocator},
               {"driver_level", driver_json(r.at_full)}};
  j["move"] = {{"blocks", r.blocks_moved},
               {"stopped_by", r.move_stop},
               {"freed_allocator_level", r.freed_allocator},
               {"freed_driver_level", r.freed_driver},
               {"cost", transfer_json(r.move)}};
  j["swap_back"] = {
      {"blocks", r.blocks_back}, {"stopped_by", r.back_stop}, {"cost", transfer_json(r.swap_back)}};
  j["driver_level_peak"] = driver_json(r.driver_peak);
  j["phases"] = Json::array();
  for (const ProbePhase& p : r.phases)
    j["phases"].push_back({{"name", p.name}, {"time_ms", p.time_ms}});
  return j;
}

std::string probe_format(const ProbeReport& r) {
  std::string s;
  if (!r.gpu) s += "no GPU: " + r.no_gpu_reason + "\n";
  s += host_text(r);
  if (r.gpu) s += device_text(r);
  s += profile_text(r);
  return s;
}

std::string probe_plot(const ProbeReport& r) {
  std::vector<ChartPanel> panels;
  if (r.gpu) {
    ChartPanel alloc{"allocator level: bytes the probe holds", "seconds", "GiB", {}, {}};
    alloc.series.push_back(
        timeline_series(r, "held", [](const TelemetrySample& t) { return t.allocator.total; }));
    for (const ProbePhase& p : r.phases) alloc.notes.emplace_back(p.time_ms / 1000.0, p.name);
    ChartPanel drv{
        "driver level: device memory used (" + r.driver_source + ")", "seconds", "GiB", {}, {}};
    drv.series.push_back(
        timeline_series(r, "device used", [](const TelemetrySample& t) { return t.driver.used; }));
    if (r.per_process)
      drv.series.push_back(timeline_series(
          r, "this process", [](const TelemetrySample& t) { return t.driver.this_process; }));
    panels.push_back(std::move(alloc));
    panels.push_back(std::move(drv));
    ChartPanel bw{
        "copy bandwidth",
        "",
        "GB/s",
        {},
        {"h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable", "move", "swap back"}};
    ChartSeries pts{"GB/s", {}, ChartSeries::Style::DOTS};
    const Transfer* t[] = {&r.h2d_pinned,   &r.d2h_pinned, &r.h2d_pageable,
                           &r.d2h_pageable, &r.move,       &r.swap_back};
    for (size_t i = 0; i < 6; ++i) pts.points.emplace_back(double(i), t[i]->gbps());
    bw.series.push_back(std::move(pts));
    panels.push_back(std::move(bw));
  } else {
    ChartPanel host{"host memcpy bandwidth per repetition (no GPU)", "repetition", "GB/s", {}, {}};
    ChartSeries pts{"memcpy", {}, ChartSeries::Style::DOTS};
    for (size_t i = 0; i < r.host_memcpy_reps_gbps.size(); ++i)
      pts.points.emplace_back(double(i + 1), r.host_memcpy_reps_gbps[i]);
    host.series.push_back(std::move(pts));
    panels.push_back(std::move(host));
  }
  return chart_svg(fmt::format("headroom probe: {}", r.gpu ? r.device : std::string("host only")),
                   panels);
}

}  // namespace hr
