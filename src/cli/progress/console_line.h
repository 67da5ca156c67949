// One status line on a terminal, redrawn in place with '\r', and the plain lines printed above
// it; on a file or a pipe nothing is redrawn and only plain lines are written.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace hr {

using ProgressClock = std::function<double()>;  // seconds on a monotonic clock
double steady_seconds();                        // the real one (tests pass a fake)

class ConsoleLine {
 public:
  // tty: redraw in place (isatty of `out`'s descriptor, decided by the caller).
  explicit ConsoleLine(bool tty, std::FILE* out = stderr, ProgressClock clock = steady_seconds);
  ConsoleLine(const ConsoleLine&) = delete;
  ConsoleLine& operator=(const ConsoleLine&) = delete;

  bool tty() const { return tty_; }
  // Redraws the status line (a terminal only); unless `force`, at most ~20 times a second
  // (Note [bar redraw rate]).
  void draw(const std::string& text, bool force = false);
  // `text` as a line of its own: above the status line, which is drawn again below it.
  void print(const std::string& text);
  // The status line's last state, kept on screen, the next status line below it; on a file or
  // a pipe, a plain line.
  void commit(const std::string& text);
  // Leaves the status line on screen as it is and moves below it.
  void keep();

 private:
  void status_write(const std::string& text);

  bool tty_;
  std::FILE* out_;
  ProgressClock clock_;
  std::string status_;  // the status line's newest text, drawn or not
  size_t width_ = 0;    // columns of the status line on screen
  bool shown_ = false;
  double last_draw_ = 0;
};

}  // namespace hr
