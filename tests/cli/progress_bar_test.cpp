// The tqdm-like bar of `headroom run`: its fields as tqdm writes them, and the smoothed rate.
#include "cli/progress/progress_bar.h"

#include <gtest/gtest.h>

namespace hr {
namespace {

TEST(ProgressBar, IntervalsAsTqdmWritesThem) {
  EXPECT_EQ(interval_format(0), "00:00");
  EXPECT_EQ(interval_format(7.9), "00:07");  // truncated, not rounded
  EXPECT_EQ(interval_format(754), "12:34");
  EXPECT_EQ(interval_format(3723), "1:02:03");
  EXPECT_EQ(interval_format(-1), "?");
}

TEST(ProgressBar, RateInStepsPerSecondOrSecondsPerStep) {
  EXPECT_EQ(rate_format(8.5), " 8.50it/s");
  EXPECT_EQ(rate_format(123.456), "123.46it/s");
  EXPECT_EQ(rate_format(0.4), " 2.50s/it");  // a big model on the CPU
  EXPECT_EQ(rate_format(0), "?it/s");
}

TEST(ProgressBar, CellsFillInEighthsOrWholeCells) {
  EXPECT_EQ(bar_cells(9, 20, 10, BarGlyphs::UNICODE), "████▌     ");
  EXPECT_EQ(bar_cells(9, 20, 10, BarGlyphs::ASCII), "####      ");
  EXPECT_EQ(bar_cells(20, 20, 10, BarGlyphs::UNICODE), "██████████");
  EXPECT_EQ(bar_cells(0, 20, 10, BarGlyphs::UNICODE), "          ");
  EXPECT_EQ(bar_cells(1, 3, 4, BarGlyphs::UNICODE), "█▎  ");  // 4/3 cells: one and 2/8
  EXPECT_EQ(bar_cells(5, 0, 4, BarGlyphs::ASCII), "    ");    // no total: empty, no crash
}

TEST(ProgressBar, LineAsComfyUIConsoleShowsIt) {
  EXPECT_EQ(progress_bar_format({20, 20, 2.35, 8.5}, BarGlyphs::UNICODE),
            "100%|██████████| 20/20 [00:02<00:00,  8.50it/s]");
  // 11 steps left at 8.5 it/s: 1.3 s.
  EXPECT_EQ(progress_bar_format({9, 20, 1.06, 8.5}, BarGlyphs::UNICODE),
            " 45%|████▌     | 9/20 [00:01<00:01,  8.50it/s]");
  EXPECT_EQ(progress_bar_format({0, 20, 0, 0}, BarGlyphs::ASCII),
            "  0%|          | 0/20 [00:00<?, ?it/s]");
  // 0.1 it/s with 990 steps left: 2 h 45 min.
  EXPECT_EQ(progress_bar_format({10, 1000, 100, 0.1}, BarGlyphs::ASCII),
            "  1%|          | 10/1000 [01:40<2:45:00, 10.00s/it]");
}

// Note [rate smoothing]: a first step that also paid 4.5 s of set-up fades from the rate.
TEST(ProgressBar, RateForgetsTheFirstStepsSetUp) {
  StepRate r;
  r.start(0);
  EXPECT_EQ(r.rate(), 0);
  r.update(1, 5.0);
  EXPECT_NEAR(r.rate(), 0.2, 1e-9);
  double t = 5.0;
  for (int n = 2; n <= 10; ++n) r.update(n, t += 0.5);
  EXPECT_NEAR(r.rate(), 1.798, 1e-3);  // the overall average would be 10 / 9.5 s = 1.05
  for (int n = 11; n <= 30; ++n) r.update(n, t += 0.5);
  EXPECT_NEAR(r.rate(), 2.0, 0.01);
  r.update(30, t += 1);  // no step done: nothing changes
  EXPECT_NEAR(r.rate(), 2.0, 0.01);
  r.start(t);  // a new bar
  EXPECT_EQ(r.rate(), 0);
}

}  // namespace
}  // namespace hr
