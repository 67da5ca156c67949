// The bench verdict rules (Note [bench verdict]) on recorded inputs: one row per branch.
#include "diagnose/verdict.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hr {
namespace {

constexpr uint64_t MiB = 1ull << 20;

ModeOutcome ran(const std::string& mode, uint64_t peak, std::vector<double> secs,
                uint64_t moved = 0) {
  ModeOutcome m;
  m.mode = mode;
  m.allocator_peak = peak;
  m.driver_peak = peak + 300 * MiB;
  m.driver_per_process = true;
  m.image_seconds = std::move(secs);
  m.moved_bytes = moved;
  m.streamed_per_image = moved * 20;
  return m;
}

ModeOutcome oom(const std::string& mode, uint64_t peak, const std::string& node,
                uint64_t moved = 0) {
  ModeOutcome m = ran(mode, peak, {}, moved);
  m.oom = true;
  m.oom_node = node;
  m.error = "out of memory";
  return m;
}

struct Row {
  const char* name;
  ModeOutcome mode, base;
  bool is_baseline;
  VerdictKind kind;
  std::vector<std::string> says;  // substrings of the text
};

TEST(BenchVerdict, RulesTable) {
  const std::vector<Row> rows = {
      {"baseline that ran",
       ran("resident", 900 * MiB, {1.0, 1.2}),
       {},
       true,
       VerdictKind::BASELINE,
       {"baseline", "900.0 MiB", "allocator level", "1.10 s"}},
      {"baseline out of memory",
       oom("resident", 900 * MiB, "3 KSampler"),
       {},
       true,
       VerdictKind::BASELINE,
       {"out of memory in node 3 KSampler"}},
      {"activation bound: same node, peak moved 2 MiB for 500 MiB streamed",
       oom("stream", 898 * MiB, "3 KSampler", 500 * MiB),
       oom("resident", 900 * MiB, "3 KSampler"),
       false,
       VerdictKind::ACTIVATION_BOUND,
       {"activations", "3 KSampler", "500.0 MiB", "2.0 MiB", "tile", "smaller batch",
        "lower resolution", "split the workflow"}},
      {"same node, but the peak moved a lot: not activation bound",
       oom("stream", 400 * MiB, "3 KSampler", 500 * MiB),
       oom("resident", 900 * MiB, "3 KSampler"),
       false,
       VerdictKind::OUT_OF_MEMORY,
       {"out of memory in node 3 KSampler", "resident:"}},
      {"different nodes: not activation bound",
       oom("stream", 899 * MiB, "8 VAEDecode", 500 * MiB),
       oom("resident", 900 * MiB, "3 KSampler"),
       false,
       VerdictKind::OUT_OF_MEMORY,
       {"8 VAEDecode", "resident: out of memory in node 3"}},
      {"same node but nothing was streamed",
       oom("auto", 900 * MiB, "3 KSampler", 0),
       oom("resident", 900 * MiB, "3 KSampler"),
       false,
       VerdictKind::OUT_OF_MEMORY,
       {"3 KSampler"}},
      {"streaming ran out where resident ran",
       oom("stream", 100 * MiB, "8 VAEDecode", 50 * MiB),
       ran("resident", 900 * MiB, {1.0}),
       false,
       VerdictKind::OUT_OF_MEMORY,
       {"resident ran"}},
      {"streaming made it fit",
       ran("stream", 300 * MiB, {3.0, 3.2}, 600 * MiB),
       oom("resident", 900 * MiB, "3 KSampler"),
       false,
       VerdictKind::FITS_ONLY_STREAMING,
       {"ran where resident ran out of memory in node 3 KSampler", "300.0 MiB", "3.10 s"}},
      {"peak fell, exactly 2x slower: a failure",
       ran("stream", 300 * MiB, {2.0}, 600 * MiB),
       ran("resident", 900 * MiB, {1.0}),
       false,
       VerdictKind::TOO_SLOW,
       {"fails for this workflow", "2.0x", "-600.0 MiB"}},
      {"peak fell, 1.9x slower: a saving with its cost",
       ran("stream", 300 * MiB, {1.9}, 600 * MiB),
       ran("resident", 900 * MiB, {1.0}),
       false,
       VerdictKind::SAVING,
       {"saves 600.0 MiB", "1.90x", "+0.90 s", "driver level -600.0 MiB"}},
      {"peak did not fall",
       ran("auto", 900 * MiB, {1.0}),
       ran("resident", 900 * MiB, {1.0}),
       false,
       VerdictKind::NO_SAVING,
       {"no saving", "no weights were streamed"}},
      {"peak rose while streaming",
       ran("stream", 950 * MiB, {1.5}, 100 * MiB),
       ran("resident", 900 * MiB, {1.0}),
       false,
       VerdictKind::NO_SAVING,
       {"+50.0 MiB"}},
  };
  for (const Row& r : rows) {
    Verdict v = bench_verdict(r.mode, r.base, r.is_baseline);
    EXPECT_EQ(verdict_kind_name(v.kind), std::string(verdict_kind_name(r.kind)))
        << r.name << ": " << v.text;
    for (const std::string& s : r.says)
      EXPECT_NE(v.text.find(s), std::string::npos)
          << r.name << ": expected '" << s << "' in: " << v.text;
  }
}

TEST(BenchVerdict, FailuresThatAreNotOutOfMemory) {
  ModeOutcome broken = ran("stream", 0, {});
  broken.error = "node 4 failed: cannot read checkpoint";
  Verdict v = bench_verdict(broken, ran("resident", 900 * MiB, {1.0}), false);
  EXPECT_EQ(v.kind, VerdictKind::FAILED);
  EXPECT_NE(v.text.find("cannot read checkpoint"), std::string::npos);
  v = bench_verdict(ran("stream", 100 * MiB, {1.0}), broken, false);
  EXPECT_EQ(v.kind, VerdictKind::FAILED);
  EXPECT_NE(v.text.find("no baseline"), std::string::npos);
}

TEST(BenchVerdict, DriverLevelOnlyWithinOneLens) {
  ModeOutcome m = ran("stream", 300 * MiB, {1.0}, 600 * MiB);
  ModeOutcome base = ran("resident", 900 * MiB, {1.0});
  base.driver_per_process = false;  // the device's used bytes: another quantity
  Verdict v = bench_verdict(m, base, false);
  EXPECT_EQ(v.kind, VerdictKind::SAVING);
  EXPECT_EQ(v.text.find("driver level"), std::string::npos) << v.text;
}

TEST(BenchVerdict, MedianAndSpread) {
  EXPECT_DOUBLE_EQ(seconds_median({}), 0);
  EXPECT_DOUBLE_EQ(seconds_median({3.0}), 3.0);
  EXPECT_DOUBLE_EQ(seconds_median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(seconds_median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(seconds_spread({4.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(seconds_spread({}), 0);
}

}  // namespace
}  // namespace hr
