// BenchProgress: the bar and the plain lines.
#include "cli/bench_progress.h"

#include <fmt/format.h>

namespace hr {

BenchProgress::BenchProgress(bool tty, int total, std::FILE* out)
    : tty_(tty), total_(total), out_(out) {}

void BenchProgress::line_end() {
  if (tty_ && drawn_) std::fputc('\n', out_);
  drawn_ = false;
}

void BenchProgress::mode_begin(const std::string& mode, const std::string& how) {
  line_end();
  mode_ = mode;
  std::fprintf(out_, "bench: mode %s: %s\n", mode.c_str(), how.c_str());
  std::fflush(out_);
}

void BenchProgress::image_begin(int index, int runs) {
  index_ = index;
  runs_ = runs;
  node_.clear();
  value_ = max_ = 0;
  draw();
}

void BenchProgress::node(const std::string& node) {
  node_ = node;
  value_ = max_ = 0;
  draw();
}

void BenchProgress::step(int value, int max) {
  value_ = value;
  max_ = max;
  draw();
}

void BenchProgress::image_end(double seconds) {
  ++done_;
  last_seconds_ = seconds;
  if (tty_) {
    draw();
    return;
  }
  std::fprintf(out_, "bench: %s image %d/%d: %.2f s (%d/%d images)\n", mode_.c_str(), index_, runs_,
               seconds, done_, total_);
  std::fflush(out_);
}

void BenchProgress::image_failed(const std::string& why) {
  done_ += runs_ - index_ + 1;  // the mode's remaining images are not run
  line_end();
  std::fprintf(out_, "bench: %s image %d/%d failed: %s\n", mode_.c_str(), index_, runs_,
               why.c_str());
  std::fflush(out_);
}

void BenchProgress::finish() { line_end(); }

// Note [bar redraw rate]: a sampler reports every step; redraws are limited to ~20 per second
// so that a fast tiny model does not spend its time writing to the terminal.
void BenchProgress::draw() {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && max_ > 0 && value_ < max_ && now - last_draw_ < std::chrono::milliseconds(50))
    return;
  last_draw_ = now;
  const int width = 24;
  const int fill = total_ > 0 ? done_ * width / total_ : 0;
  std::string line =
      fmt::format("[{}{}] {}/{} images  {} {}/{}", std::string(size_t(fill), '#'),
                  std::string(size_t(width - fill), '.'), done_, total_, mode_, index_, runs_);
  if (!node_.empty()) line += "  node " + node_;
  if (max_ > 0) line += fmt::format(" {}/{}", value_, max_);
  if (last_seconds_ >= 0) line += fmt::format("  last {:.2f} s/image", last_seconds_);
  std::fprintf(out_, "\r%-110s", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace hr
