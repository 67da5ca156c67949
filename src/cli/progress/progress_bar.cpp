// The tqdm-like bar: its fields and the smoothed rate.
#include "cli/progress/progress_bar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hr {

std::string interval_format(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = long(seconds);  // tqdm truncates
  const long h = s / 3600, m = s / 60 % 60, sec = s % 60;
  if (h > 0) return fmt::format("{}:{:02}:{:02}", h, m, sec);
  return fmt::format("{:02}:{:02}", m, sec);
}

std::string rate_format(double steps_per_second) {
  if (!(steps_per_second > 0)) return "?it/s";
  if (steps_per_second < 1) return fmt::format("{:5.2f}s/it", 1 / steps_per_second);
  return fmt::format("{:5.2f}it/s", steps_per_second);
}

std::string bar_cells(int n, int total, int width, BarGlyphs glyphs) {
  // tqdm's charsets: a space, the partial cells, the full cell.
  static const char* const kUnicode[] = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};
  static const char* const kAscii[] = {" ", "#"};
  const char* const* set = glyphs == BarGlyphs::UNICODE ? kUnicode : kAscii;
  const int parts = glyphs == BarGlyphs::UNICODE ? 8 : 1;
  const double frac = total > 0 ? std::clamp(double(n) / total, 0.0, 1.0) : 0.0;
  const int eighths = int(frac * width * parts);
  const int full = eighths / parts;
  std::string out;
  for (int i = 0; i < full; ++i) out += set[parts];
  if (full < width) out += set[eighths % parts];
  for (int i = full + 1; i < width; ++i) out += ' ';
  return out;
}

std::string progress_bar_format(const BarState& s, BarGlyphs glyphs, int width) {
  const double frac = s.total > 0 ? double(s.n) / s.total : 0.0;
  const double left = s.rate > 0 ? (s.total - s.n) / s.rate : -1;
  return fmt::format("{:3.0f}%|{}| {}/{} [{}<{}, {}]", frac * 100,
                     bar_cells(s.n, s.total, width, glyphs), s.n, s.total,
                     interval_format(s.elapsed), interval_format(left), rate_format(s.rate));
}

void StepRate::start(double t) {
  *this = StepRate{};
  last_t_ = t;
}

// Note [rate smoothing]. tqdm divides each average by 1 - (1 - alpha)^updates so that the first
// updates are not pulled towards the zeros they start from; the ratio cancels that factor.
void StepRate::update(int n, double t) {
  const double dn = n - last_n_, dt = t - last_t_;
  if (dn <= 0 || dt <= 0) return;
  ema_dn_ = kAlpha * dn + (1 - kAlpha) * ema_dn_;
  ema_dt_ = kAlpha * dt + (1 - kAlpha) * ema_dt_;
  last_n_ = n;
  last_t_ = t;
}

double StepRate::rate() const { return ema_dt_ > 0 ? ema_dn_ / ema_dt_ : 0; }

}  // namespace hr
