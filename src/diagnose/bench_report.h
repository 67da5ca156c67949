// The report of `headroom bench`: each memory mode's measurements and verdict, as a table, as
// JSON and as a chart (memory over time per lens, time per image).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "diagnose/verdict.h"

namespace hr {

using Json = nlohmann::json;

struct BenchMode {
  ModeOutcome outcome;
  std::string how;  // the policy in words: "--gpu-only: never stream; budget 12 MiB (...)"
  // (seconds since the mode started, bytes): allocator level and driver level, never mixed.
  std::vector<std::pair<double, uint64_t>> allocator_held;
  std::vector<std::pair<double, uint64_t>> driver_used;
  Verdict verdict;
};

struct BenchReport {
  std::string workflow;
  std::string device;
  std::string dtype;
  std::string driver_source;     // the driver-level lens (DriverLens::source)
  uint64_t budget = UINT64_MAX;  // allocator level
  int runs = 0;
  std::vector<BenchMode> modes;  // in the order they ran
  size_t baseline = 0;           // index into modes
};

// Picks the baseline (the "resident" mode when it ran, else the first) and sets every verdict.
void bench_judge(BenchReport& report);

std::string bench_format(const BenchReport& report);
Json bench_json(const BenchReport& report);
std::string bench_plot(const BenchReport& report);

}  // namespace hr
