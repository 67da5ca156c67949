// RunProgress: ExecEvents turned into the lines of `headroom run`.
#include "cli/progress/run_progress.h"

#include <fmt/format.h>

#include <utility>

namespace hr {

// Note [run progress]: the executor reports EXECUTING when a node starts and PROGRESS per
// sampler step (the events the server sends as ComfyUI's `executing` and `progress`), but
// nothing when a node that is not an output ends: a node ends when the next one starts or the
// prompt returns. On a terminal each node is one line, redrawn while it runs and kept with its
// time; on a file or a pipe a node is a line when it starts and one when it ends, and a bar a
// line at every tenth of its steps, so that 1000 steps are not 1000 lines.
RunProgress::RunProgress(ConsoleLine& line, size_t total_nodes, ProgressClock clock)
    : line_(line), clock_(std::move(clock)), total_nodes_(total_nodes), start_(clock_()) {}

void RunProgress::on_event(const ExecEvent& e) {
  switch (e.kind) {
    case ExecEvent::Kind::CACHED:
      done_ += e.cached.size();
      break;
    case ExecEvent::Kind::EXECUTING:
      node_begin(e);
      break;
    case ExecEvent::Kind::PROGRESS:
      step(e.value, e.max);
      break;
    case ExecEvent::Kind::MEMORY:
    case ExecEvent::Kind::WARNING:
      message(e);
      break;
    case ExecEvent::Kind::EXECUTED:
    case ExecEvent::Kind::PREVIEW:
      break;
  }
}

void RunProgress::finish(bool ok) {
  if (open_) node_end(ok);
  if (ok) line_.print(fmt::format("headroom: prompt executed in {:.2f} s", clock_() - start_));
}

void RunProgress::node_begin(const ExecEvent& e) {
  if (open_) node_end(true);
  open_ = true;
  ++done_;
  label_ =
      fmt::format("headroom: [{}/{}] node {} {}", done_, total_nodes_, e.node_id, e.class_type);
  node_start_ = clock_();
  bar_ = BarState{};
  printed_tenth_ = 0;
  if (line_.tty())
    line_.draw(label_, true);
  else
    line_.print(label_);
}

void RunProgress::node_end(bool ok) {
  open_ = false;
  const double secs = clock_() - node_start_;
  // On a terminal the node's line keeps its bar; in plain lines the bar's lines came before.
  const std::string text = line_.tty() ? node_text() : label_;
  line_.commit(ok ? fmt::format("{} done in {:.2f} s", text, secs)
                  : fmt::format("{} failed after {:.2f} s", text, secs));
}

void RunProgress::step(int n, int total) {
  if (total <= 0) return;
  const double now = clock_();
  if (total != bar_.total || n < bar_.n) {  // a new bar (a node may sample more than once)
    rate_.start(bar_.total == 0 ? node_start_ : now);
    printed_tenth_ = 0;
  }
  rate_.update(n, now);
  bar_ = BarState{n, total, now - node_start_, rate_.rate()};
  if (line_.tty()) return line_.draw(node_text(), n == total);
  const int tenth = n * 10 / total;
  if (tenth <= printed_tenth_ && n != total) return;
  printed_tenth_ = tenth;
  line_.print(node_text());
}

void RunProgress::message(const ExecEvent& e) {
  line_.print(fmt::format("headroom: node {} {}: {}", e.node_id, e.class_type, e.message));
}

std::string RunProgress::node_text() const {
  if (bar_.total <= 0) return label_;
  const BarGlyphs glyphs = line_.tty() ? BarGlyphs::UNICODE : BarGlyphs::ASCII;
  return label_ + " " + progress_bar_format(bar_, glyphs);
}

}  // namespace hr
