// The bench report: the baseline choice, the table, the JSON and the chart of recorded modes.
#include "diagnose/bench_report.h"

#include <gtest/gtest.h>

#include "svg_check.h"

namespace hr {
namespace {

constexpr uint64_t MiB = 1ull << 20;

BenchMode mode(const std::string& name, uint64_t peak, std::vector<double> secs, uint64_t moved) {
  BenchMode m;
  m.outcome.mode = name;
  m.outcome.allocator_peak = peak;
  m.outcome.driver_peak = peak + 100 * MiB;
  m.outcome.driver_per_process = true;
  m.outcome.image_seconds = std::move(secs);
  m.outcome.moved_bytes = moved;
  m.how = name + " policy";
  m.allocator_held = {{0, 0}, {0.5, peak}, {1, peak / 2}};
  m.driver_used = {{0, 100 * MiB}, {0.5, peak + 100 * MiB}};
  return m;
}

BenchReport recorded() {
  BenchReport r;
  r.workflow = "wf.json";
  r.device = "cpu";
  r.dtype = "f32";
  r.driver_source = "host (/proc)";
  r.budget = 12 * MiB;
  r.runs = 2;
  r.modes = {mode("stream", 5 * MiB, {2.0, 2.2}, 8 * MiB),
             mode("resident", 11 * MiB, {1.0, 1.2}, 0), mode("auto", 11 * MiB, {1.0, 1.1}, 0)};
  return r;
}

TEST(BenchReport, BaselineIsResidentWhereverItRan) {
  BenchReport r = recorded();
  bench_judge(r);
  EXPECT_EQ(r.baseline, 1u);
  EXPECT_EQ(r.modes[1].verdict.kind, VerdictKind::BASELINE);
  EXPECT_EQ(r.modes[0].verdict.kind, VerdictKind::SAVING);  // 1.91x: below the 2x rule
  EXPECT_EQ(r.modes[2].verdict.kind, VerdictKind::NO_SAVING);
  r.modes.erase(r.modes.begin() + 1);
  bench_judge(r);
  EXPECT_EQ(r.baseline, 0u);  // no resident mode: the first one
  EXPECT_EQ(r.modes[0].verdict.kind, VerdictKind::BASELINE);
}

TEST(BenchReport, TableJsonAndChart) {
  BenchReport r = recorded();
  bench_judge(r);
  const std::string s = bench_format(r);
  EXPECT_NE(s.find("| stream | 2 | 2.100 s | 0.200 s | 5.0 MiB | 105.0 MiB |"), std::string::npos)
      << s;
  EXPECT_NE(s.find("driver-level peak (this process)"), std::string::npos);
  EXPECT_NE(s.find("allocator-level peak"), std::string::npos);
  EXPECT_NE(s.find("verdict:\n  stream: saves 6.0 MiB"), std::string::npos) << s;
  Json j = Json::parse(bench_json(r).dump());
  EXPECT_EQ(j["baseline"], "resident");
  ASSERT_EQ(j["modes"].size(), 3u);
  EXPECT_EQ(j["modes"][0]["verdict"]["kind"], "saving");
  EXPECT_DOUBLE_EQ(j["modes"][0]["median_seconds"].get<double>(), 2.1);
  EXPECT_EQ(j["budget"], 12 * MiB);
  const std::string svg = bench_plot(r);
  test::SvgCheck c = test::svg_check(svg);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.count("polyline"), 3u + 3u);  // per mode and lens
  EXPECT_NE(svg.find("time per image"), std::string::npos);
}

}  // namespace
}  // namespace hr
