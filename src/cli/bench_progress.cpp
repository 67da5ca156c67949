// BenchProgress: the bar and the plain lines.
#include "cli/bench_progress.h"

#include <fmt/format.h>

namespace hr {

BenchProgress::BenchProgress(bool tty, int total, std::FILE* out)
    : line_(tty, out), total_(total) {}

void BenchProgress::mode_begin(const std::string& mode, const std::string& how) {
  mode_ = mode;
  line_.print(fmt::format("bench: mode {}: {}", mode, how));
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
  if (line_.tty()) return draw();
  line_.print(fmt::format("bench: {} image {}/{}: {:.2f} s ({}/{} images)", mode_, index_, runs_,
                          seconds, done_, total_));
}

void BenchProgress::image_failed(const std::string& why) {
  done_ += runs_ - index_ + 1;  // the mode's remaining images are not run
  line_.print(fmt::format("bench: {} image {}/{} failed: {}", mode_, index_, runs_, why));
}

void BenchProgress::finish() { line_.keep(); }

// Only a sampler's steps wait for the redraw rate (Note [bar redraw rate]).
void BenchProgress::draw() {
  if (!line_.tty()) return;
  const int width = 24;
  const int fill = total_ > 0 ? done_ * width / total_ : 0;
  std::string text =
      fmt::format("[{}{}] {}/{} images  {} {}/{}", std::string(size_t(fill), '#'),
                  std::string(size_t(width - fill), '.'), done_, total_, mode_, index_, runs_);
  if (!node_.empty()) text += "  node " + node_;
  if (max_ > 0) text += fmt::format(" {}/{}", value_, max_);
  if (last_seconds_ >= 0) text += fmt::format("  last {:.2f} s/image", last_seconds_);
  line_.draw(text, max_ == 0 || value_ >= max_);
}

}  // namespace hr
