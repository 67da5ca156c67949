// ConsoleLine: the redrawn status line and the plain lines around it.
#include "cli/progress/console_line.h"

#include <chrono>
#include <utility>

namespace hr {
namespace {

// Columns of UTF-8 text whose glyphs are one column wide each (the bar's block glyphs are).
size_t columns_of(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ConsoleLine::ConsoleLine(bool tty, std::FILE* out, ProgressClock clock)
    : tty_(tty), out_(out), clock_(std::move(clock)) {}

// Note [bar redraw rate]: a sampler reports every step; redraws are limited to ~20 per second
// so that a fast tiny model does not spend its time writing to the terminal. The newest text
// is kept, so the next forced draw or print shows it.
void ConsoleLine::draw(const std::string& text, bool force) {
  if (!tty_) return;
  status_ = text;
  if (!force && shown_ && clock_() - last_draw_ < 0.05) return;
  status_write(text);
}

void ConsoleLine::print(const std::string& text) {
  const bool redraw = tty_ && shown_;
  if (redraw) std::fprintf(out_, "\r%*s\r", int(width_), "");
  std::fprintf(out_, "%s\n", text.c_str());
  width_ = 0;
  shown_ = false;
  if (redraw) status_write(status_);
  std::fflush(out_);
}

void ConsoleLine::commit(const std::string& text) {
  if (!tty_) return print(text);
  status_write(text);
  keep();
  status_.clear();
}

void ConsoleLine::keep() {
  if (shown_) std::fputc('\n', out_);
  std::fflush(out_);
  shown_ = false;
  width_ = 0;
}

void ConsoleLine::status_write(const std::string& text) {
  const size_t columns = columns_of(text);
  const int pad = width_ > columns ? int(width_ - columns) : 0;  // what the old line showed more
  std::fprintf(out_, "\r%s%*s", text.c_str(), pad, "");
  std::fflush(out_);
  width_ = columns;
  shown_ = true;
  last_draw_ = clock_();
}

}  // namespace hr
