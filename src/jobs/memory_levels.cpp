// MemoryLevels: a pair of fractions under one lock.
#include "jobs/memory_levels.h"

namespace hr {

Status memory_levels_check(double warning, double danger) {
  // Written so that NaN fails too.
  if (!(warning > 0.0 && warning <= danger && danger <= 1.0))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "memory levels must satisfy 0 < warning <= danger <= 1 (got warning {}, "
                      "danger {})",
                      warning, danger);
  return Status();
}

Status MemoryLevels::set(double warning, double danger) {
  HR_TRY(memory_levels_check(warning, danger));
  std::lock_guard<std::mutex> lock(mu_);
  warning_ = warning;
  danger_ = danger;
  return Status();
}

double MemoryLevels::warning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warning_;
}

double MemoryLevels::danger() const {
  std::lock_guard<std::mutex> lock(mu_);
  return danger_;
}

uint64_t MemoryLevels::level_bytes(uint64_t budget, double fraction) {
  if (budget == UINT64_MAX) return UINT64_MAX;
  return uint64_t(double(budget) * fraction);
}

}  // namespace hr
