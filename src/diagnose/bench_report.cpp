// bench_judge and the three renderings of a bench report.
#include "diagnose/bench_report.h"

#include <fmt/format.h>

#include "core/bytes.h"
#include "diagnose/chart.h"

namespace hr {
namespace {

std::string driver_label(const BenchReport& r) {
  const bool per = !r.modes.empty() && r.modes.front().outcome.driver_per_process;
  return per ? "driver-level peak (this process)" : "driver-level peak (device)";
}

std::string row(const BenchMode& m) {
  const ModeOutcome& o = m.outcome;
  const std::string times = o.image_seconds.empty()
                                ? std::string("-")
                                : fmt::format("{:.3f} s", seconds_median(o.image_seconds));
  const std::string spread = o.image_seconds.empty()
                                 ? std::string("-")
                                 : fmt::format("{:.3f} s", seconds_spread(o.image_seconds));
  const std::string oom = o.oom ? fmt::format("in node {}", o.oom_node.empty() ? "?" : o.oom_node)
                                : (o.error.empty() ? "no" : "failed");
  return fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", o.mode, o.image_seconds.size(),
                     times, spread, bytes_format(o.allocator_peak), bytes_format(o.driver_peak),
                     bytes_format(o.streamed_per_image), oom);
}

ChartSeries held_series(const BenchMode& m, bool driver) {
  ChartSeries s;
  s.name = m.outcome.mode;
  for (const auto& [t, b] : driver ? m.driver_used : m.allocator_held)
    s.points.emplace_back(t, double(b) / double(1ull << 20));
  return s;
}

}  // namespace

void bench_judge(BenchReport& r) {
  r.baseline = 0;
  for (size_t i = 0; i < r.modes.size(); ++i)
    if (r.modes[i].outcome.mode == "resident") r.baseline = i;
  for (size_t i = 0; i < r.modes.size(); ++i)
    r.modes[i].verdict =
        bench_verdict(r.modes[i].outcome, r.modes[r.baseline].outcome, i == r.baseline);
}

std::string bench_format(const BenchReport& r) {
  std::string s = fmt::format(
      "bench: {} on {} in {}, {} run(s) per mode, budget {} (allocator level); driver level: "
      "{}\n\n",
      r.workflow, r.device, r.dtype, r.runs,
      r.budget == UINT64_MAX ? std::string("none") : bytes_format(r.budget), r.driver_source);
  s += fmt::format(
      "| mode | images | per image (median) | spread (max-min) | allocator-level peak "
      "| {} | streamed per image | out of memory |\n",
      driver_label(r));
  s += "|---|---|---|---|---|---|---|---|\n";
  for (const BenchMode& m : r.modes) s += row(m);
  s += "\n";
  for (const BenchMode& m : r.modes) s += fmt::format("{}: {}\n", m.outcome.mode, m.how);
  s += "\nverdict:\n";
  for (const BenchMode& m : r.modes) s += fmt::format("  {}: {}\n", m.outcome.mode, m.verdict.text);
  return s;
}

Json bench_json(const BenchReport& r) {
  Json j;
  j["workflow"] = r.workflow;
  j["device"] = r.device;
  j["dtype"] = r.dtype;
  j["driver_source"] = r.driver_source;
  j["budget"] = r.budget == UINT64_MAX ? Json(nullptr) : Json(r.budget);
  j["runs"] = r.runs;
  j["baseline"] = r.modes.empty() ? Json(nullptr) : Json(r.modes[r.baseline].outcome.mode);
  j["modes"] = Json::array();
  for (const BenchMode& m : r.modes) {
    const ModeOutcome& o = m.outcome;
    j["modes"].push_back(
        {{"mode", o.mode},
         {"policy", m.how},
         {"images", o.image_seconds.size()},
         {"image_seconds", o.image_seconds},
         {"median_seconds", seconds_median(o.image_seconds)},
         {"spread_seconds", seconds_spread(o.image_seconds)},
         {"allocator_level_peak", o.allocator_peak},
         {"driver_level_peak", o.driver_peak},
         {"driver_level_per_process", o.driver_per_process},
         {"out_of_memory", o.oom},
         {"oom_node", o.oom_node},
         {"error", o.error},
         {"moved_bytes", o.moved_bytes},
         {"streamed_per_image", o.streamed_per_image},
         {"verdict", {{"kind", verdict_kind_name(m.verdict.kind)}, {"text", m.verdict.text}}}});
  }
  return j;
}

std::string bench_plot(const BenchReport& r) {
  ChartPanel alloc{"allocator level: bytes held", "seconds since the mode started", "MiB", {}, {}};
  ChartPanel drv{driver_label(r) == "driver-level peak (this process)"
                     ? "driver level: this process (" + r.driver_source + ")"
                     : "driver level: device used (" + r.driver_source + ")",
                 "seconds since the mode started",
                 "MiB",
                 {},
                 {}};
  ChartPanel times{"time per image", "", "seconds", {}, {}};
  ChartSeries dots{"image", {}, ChartSeries::Style::DOTS};
  ChartSeries medians{"median", {}, ChartSeries::Style::MARKS};
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const BenchMode& m = r.modes[i];
    alloc.series.push_back(held_series(m, false));
    drv.series.push_back(held_series(m, true));
    times.x_categories.push_back(m.outcome.mode);
    for (double t : m.outcome.image_seconds) dots.points.emplace_back(double(i), t);
    if (!m.outcome.image_seconds.empty())
      medians.points.emplace_back(double(i), seconds_median(m.outcome.image_seconds));
    if (m.outcome.oom)
      times.notes.emplace_back(double(i),
                               m.outcome.oom_node.empty()
                                   ? std::string("out of memory")
                                   : fmt::format("out of memory in {}", m.outcome.oom_node));
    else if (!m.outcome.error.empty())
      times.notes.emplace_back(double(i), "failed");
  }
  times.series.push_back(std::move(dots));
  times.series.push_back(std::move(medians));
  return chart_svg("headroom bench: " + r.workflow + " on " + r.device, {alloc, drv, times});
}

}  // namespace hr
