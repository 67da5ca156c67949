// What `headroom run` shows on stderr while a prompt runs, as ComfyUI's console does: each node
// as it starts, a sampler's tqdm-like bar, each node's time as it ends, the memory decisions,
// and the prompt's total (Note [run progress]).
#pragma once

#include <cstddef>
#include <string>

#include "cli/progress/console_line.h"
#include "cli/progress/progress_bar.h"
#include "workflow/execute.h"

namespace hr {

class RunProgress {
 public:
  // total_nodes: the nodes the prompt runs (PromptExecutor::execution_order).
  RunProgress(ConsoleLine& line, size_t total_nodes, ProgressClock clock = steady_seconds);
  RunProgress(const RunProgress&) = delete;
  RunProgress& operator=(const RunProgress&) = delete;

  void on_event(const ExecEvent& e);
  // Ends the running node, as failed unless `ok`; when `ok`, also the prompt's total time.
  void finish(bool ok);

 private:
  void node_begin(const ExecEvent& e);
  void node_end(bool ok);
  void step(int n, int total);
  void message(const ExecEvent& e);
  std::string node_text() const;  // "headroom: [5/7] node 3 KSampler" and the bar, if any

  ConsoleLine& line_;
  ProgressClock clock_;
  size_t total_nodes_, done_ = 0;
  double start_;
  // The running node.
  bool open_ = false;
  std::string label_;
  double node_start_ = 0;
  BarState bar_;
  StepRate rate_;
  int printed_tenth_ = 0;  // of the bar, in plain lines
};

}  // namespace hr
