// The warning and danger levels of the memory budget (fractions of it): the worker degrades a
// job's plan above warning and holds the queue above danger (jobs/job_runner.h); vram_update
// and /headroom/memory report them. Changed at run time by POST /headroom/levels.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/status.h"

namespace hr {

class MemoryLevels {
 public:
  static constexpr double kWarning = 0.8, kDanger = 0.9;  // defaults (the 80 % / 90 %)

  MemoryLevels() = default;
  MemoryLevels(const MemoryLevels&) = delete;
  MemoryLevels& operator=(const MemoryLevels&) = delete;

  // INVALID_ARGUMENT unless 0 < warning <= danger <= 1; nothing changes then.
  Status set(double warning, double danger);
  double warning() const;
  double danger() const;
  // `fraction` of `budget` in bytes; UINT64_MAX for an unlimited budget (no level applies).
  static uint64_t level_bytes(uint64_t budget, double fraction);

 private:
  mutable std::mutex mu_;  // the two change together
  double warning_ = kWarning, danger_ = kDanger;
};

// Checks a pair of levels as MemoryLevels::set does (for flags, before the server starts).
Status memory_levels_check(double warning, double danger);

}  // namespace hr
