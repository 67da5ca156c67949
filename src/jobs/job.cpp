// Job helpers: queue items, outcome names, prompt ids.
#include "jobs/job.h"

#include <fmt/format.h>

#include <mutex>
#include <random>

namespace hr {

std::string Job::client_id() const {
  auto it = extra_data.find("client_id");
  return it != extra_data.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Json Job::queue_item() const {
  return Json::array({number, prompt_id, prompt, extra_data, outputs});
}

const char* job_outcome_name(JobOutcome o) {
  switch (o) {
    case JobOutcome::SUCCESS:
      return "success";
    case JobOutcome::ERROR:
      return "error";
    case JobOutcome::INTERRUPTED:
      return "interrupted";
    case JobOutcome::REJECTED:
      return "rejected";
    case JobOutcome::COUNT_:
      break;
  }
  return "?";
}

std::string prompt_id_new() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = rng();
    lo = rng();
  }
  hi = (hi & ~0xF000ull) | 0x4000ull;                         // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull;  // RFC 4122 variant
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xFFFF,
                     hi & 0xFFFF, lo >> 48, lo & 0xFFFFFFFFFFFFull);
}

}  // namespace hr
