// The verdict of `headroom bench`: what one memory mode did against the baseline mode, by the
// rules of Note [bench verdict]. Pure logic over measured numbers, so that every rule is tested
// on recorded inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hr {

// One mode's measurements. Peaks are per lens and only ever compared within their lens.
struct ModeOutcome {
  std::string mode;             // "resident", "stream", "auto"
  uint64_t allocator_peak = 0;  // allocator level: bytes headroom held at most
  uint64_t driver_peak = 0;     // driver level: this process where measured, else the device
  bool driver_per_process = false;
  std::vector<double> image_seconds;  // one per completed image
  bool oom = false;                   // a run ran out of memory
  std::string oom_node;               // "3 KSampler"
  std::string error;                  // the failure's message (OOM or not)
  // Weights kept off the device by streaming: the largest streamed set of one model call.
  uint64_t moved_bytes = 0;
  uint64_t streamed_per_image = 0;  // bytes copied host to device per image (traffic)
};

// Of the completed images' seconds; 0 when there are none.
double seconds_median(const std::vector<double>& s);
double seconds_spread(const std::vector<double>& s);  // max - min

enum class VerdictKind : uint8_t {
  BASELINE = 0,         // the mode the others are compared with
  SAVING,               // the peak fell, at a cost in time below kSlowdownFailure
  NO_SAVING,            // the peak did not fall
  TOO_SLOW,             // the peak fell but images took kSlowdownFailure times as long or more
  ACTIVATION_BOUND,     // out of memory in the same node both ways; streaming barely helped
  FITS_ONLY_STREAMING,  // this mode ran where the baseline ran out of memory
  OUT_OF_MEMORY,        // this mode ran out of memory (and the activation rule does not hold)
  FAILED,               // it failed for another reason
};
const char* verdict_kind_name(VerdictKind k);  // "baseline", "saving", ...

struct Verdict {
  VerdictKind kind = VerdictKind::BASELINE;
  std::string text;  // one or two sentences a user can act on
};

// Note [bench verdict] in verdict.cpp.
constexpr double kSlowdownFailure = 2.0;
constexpr double kFarSmaller = 0.1;

Verdict bench_verdict(const ModeOutcome& mode, const ModeOutcome& baseline, bool is_baseline);

}  // namespace hr
