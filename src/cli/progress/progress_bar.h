// A sampler's progress as tqdm draws it in ComfyUI's console,
// " 45%|████▌     | 9/20 [00:01<00:01,  8.50it/s]", and the smoothed rate that line shows.
#pragma once

#include <string>

namespace hr {

enum class BarGlyphs { UNICODE, ASCII };  // eighths of a cell in block glyphs; '#' cells

// "00:07", "12:34", "1:02:03" (tqdm's format_interval); negative or not finite: "?".
std::string interval_format(double seconds);

// "8.50it/s"; below one step a second "2.35s/it", as tqdm writes it; zero or less: "?it/s".
std::string rate_format(double steps_per_second);

// `width` cells filled in proportion to n / total (tqdm's Bar).
std::string bar_cells(int n, int total, int width, BarGlyphs glyphs);

struct BarState {
  int n = 0, total = 0;
  double elapsed = 0;  // seconds since the bar started
  double rate = 0;     // steps per second; 0: not known yet
};

// " 45%|████▌     | 9/20 [00:01<00:01,  8.50it/s]": time left is (total - n) / rate.
std::string progress_bar_format(const BarState& s, BarGlyphs glyphs, int width = 10);

// Note [rate smoothing]: the rate is tqdm's exponential moving average (smoothing 0.3) of steps
// over seconds between updates, not steps over the whole time: the first step also pays for the
// sampler's set-up (weights upload, graph capture), and an average over the whole time would keep
// that cost in the estimate of the time left to the end.
class StepRate {
 public:
  void start(double t);          // the bar's clock starts
  void update(int n, double t);  // n steps done at time t (seconds)
  double rate() const;           // steps per second; 0 before the first step

 private:
  static constexpr double kAlpha = 0.3;
  double last_t_ = 0, ema_dn_ = 0, ema_dt_ = 0;
  int last_n_ = 0;
};

}  // namespace hr
