// The progress display of `headroom bench` on stderr: one bar redrawn in place on a terminal
// (overall images, the running node and its steps, the last image's time), plain lines, one per
// image, when stderr is a file or a pipe.
#pragma once

#include <cstdio>
#include <string>

#include "cli/progress/console_line.h"

namespace hr {

class BenchProgress {
 public:
  // total: images over all modes. tty: draw in place (isatty(stderr)) or print plain lines.
  BenchProgress(bool tty, int total, std::FILE* out = stderr);
  BenchProgress(const BenchProgress&) = delete;
  BenchProgress& operator=(const BenchProgress&) = delete;

  void mode_begin(const std::string& mode, const std::string& how);
  void image_begin(int index, int runs);  // index from 1
  void node(const std::string& node);
  void step(int value, int max);
  void image_end(double seconds);
  void image_failed(const std::string& why);
  void finish();  // ends the redrawn line

 private:
  void draw();

  ConsoleLine line_;
  int total_;
  int done_ = 0;
  std::string mode_, node_;
  int index_ = 0, runs_ = 0, value_ = 0, max_ = 0;
  double last_seconds_ = -1;
};

}  // namespace hr
