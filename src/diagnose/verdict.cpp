// bench_verdict: the rules that turn one mode's measurements into a verdict.
#include "diagnose/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/bytes.h"

namespace hr {

// Note [bench verdict]
// `headroom bench` runs one workflow in several memory modes with everything else fixed, and
// judges each mode against the baseline (the resident mode when it was run, else the first mode)
// by these rules, first match wins:
// 1. Both ran out of memory in the same node and the peak moved by less than kFarSmaller of the
//    weights streaming kept off the device: the peak is activations, which no weight placement
//    changes. The verdict names the remedies that shrink activations.
// 2. This mode ran out of memory: say where (and where the baseline did, if it did).
// 3. The baseline ran out of memory and this mode did not: streaming made it fit; its peak and
//    time per image are the price.
// 4. The peak fell but the median time per image grew kSlowdownFailure times or more: streaming
//    counts as a failure for this workflow (a smaller resolution or batch would serve better).
// 5. The peak did not fall: nothing saved.
// 6. Otherwise the saving and its cost.
// Peaks compare at the allocator level (what the budget governs); the driver-level difference is
// added only when both modes measured the same driver-level quantity. Lenses are never mixed.

namespace {

const char* kActivationRemedies =
    "tile it (VAEDecodeTiled/VAEEncodeTiled for the VAE), use a smaller batch, a lower "
    "resolution, or split the workflow into parts that run one after another";

// "-1.2 GiB" / "+3.0 MiB": b relative to a.
std::string bytes_delta(uint64_t from, uint64_t to) {
  return fmt::format("{}{}", to <= from ? "-" : "+",
                     bytes_format(to <= from ? from - to : to - from));
}

std::string peak_phrase(const ModeOutcome& m, const ModeOutcome& base) {
  std::string s = fmt::format("peak {} ({} vs {}, allocator level", bytes_format(m.allocator_peak),
                              bytes_delta(base.allocator_peak, m.allocator_peak), base.mode);
  if (m.driver_per_process == base.driver_per_process && m.driver_peak && base.driver_peak)
    s += fmt::format("; driver level {}", bytes_delta(base.driver_peak, m.driver_peak));
  return s + ")";
}

std::string oom_where(const ModeOutcome& m) {
  return m.oom_node.empty() ? std::string("out of memory")
                            : fmt::format("out of memory in node {}", m.oom_node);
}

uint64_t abs_diff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

Verdict baseline_verdict(const ModeOutcome& m) {
  if (m.oom) return {VerdictKind::BASELINE, fmt::format("baseline: {}", oom_where(m))};
  if (!m.error.empty())
    return {VerdictKind::BASELINE, fmt::format("baseline: failed: {}", m.error)};
  return {VerdictKind::BASELINE,
          fmt::format("baseline: peak {} (allocator level), {:.2f} s per image",
                      bytes_format(m.allocator_peak), seconds_median(m.image_seconds))};
}

}  // namespace

double seconds_median(const std::vector<double>& s) {
  if (s.empty()) return 0;
  std::vector<double> v = s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double seconds_spread(const std::vector<double>& s) {
  if (s.empty()) return 0;
  auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  return *hi - *lo;
}

const char* verdict_kind_name(VerdictKind k) {
  switch (k) {
    case VerdictKind::BASELINE:
      return "baseline";
    case VerdictKind::SAVING:
      return "saving";
    case VerdictKind::NO_SAVING:
      return "no_saving";
    case VerdictKind::TOO_SLOW:
      return "too_slow";
    case VerdictKind::ACTIVATION_BOUND:
      return "activation_bound";
    case VerdictKind::FITS_ONLY_STREAMING:
      return "fits_only_streaming";
    case VerdictKind::OUT_OF_MEMORY:
      return "out_of_memory";
    case VerdictKind::FAILED:
      return "failed";
  }
  return "?";
}

Verdict bench_verdict(const ModeOutcome& m, const ModeOutcome& base, bool is_baseline) {
  if (is_baseline) return baseline_verdict(m);
  const uint64_t diff = abs_diff(m.allocator_peak, base.allocator_peak);
  if (m.oom && base.oom && m.oom_node == base.oom_node && m.moved_bytes > 0 &&
      double(diff) < kFarSmaller * double(m.moved_bytes))
    return {VerdictKind::ACTIVATION_BOUND,
            fmt::format("the bottleneck is activations: {} with and without streaming, and "
                        "streaming {} of weights changed the peak by only {} (allocator level). "
                        "Moving weights cannot fix this; {}",
                        oom_where(m), bytes_format(m.moved_bytes), bytes_format(diff),
                        kActivationRemedies)};
  if (m.oom) {
    const std::string base_said = base.oom ? fmt::format("{}: {}", base.mode, oom_where(base))
                                           : fmt::format("{} ran", base.mode);
    return {VerdictKind::OUT_OF_MEMORY, fmt::format("{} ({})", oom_where(m), base_said)};
  }
  if (!m.error.empty()) return {VerdictKind::FAILED, fmt::format("failed: {}", m.error)};
  const double t = seconds_median(m.image_seconds), t0 = seconds_median(base.image_seconds);
  if (base.oom)
    return {VerdictKind::FITS_ONLY_STREAMING,
            fmt::format("ran where {} ran {}: peak {} (allocator level), {:.2f} s per image, "
                        "{} streamed per image",
                        base.mode, oom_where(base), bytes_format(m.allocator_peak), t,
                        bytes_format(m.streamed_per_image))};
  if (!base.error.empty())
    return {VerdictKind::FAILED, fmt::format("no baseline to compare: {}", base.error)};
  const double ratio = t0 > 0 ? t / t0 : 0;
  const bool fell = m.allocator_peak < base.allocator_peak;
  if (fell && ratio >= kSlowdownFailure)
    return {VerdictKind::TOO_SLOW,
            fmt::format("streaming fails for this workflow: {}, but each image took {:.1f}x as "
                        "long ({:.2f} s vs {:.2f} s); lower the resolution or batch instead",
                        peak_phrase(m, base), ratio, t, t0)};
  if (!fell)
    return {VerdictKind::NO_SAVING, fmt::format("no saving: {}{}", peak_phrase(m, base),
                                                m.moved_bytes ? "" : "; no weights were streamed")};
  return {VerdictKind::SAVING,
          fmt::format("saves {} at the peak, {}, at {:.2f}x the time per image ({:+.2f} s)",
                      bytes_format(diff), peak_phrase(m, base), ratio, t - t0)};
}

}  // namespace hr
