// `headroom run`: validate and execute one API-format workflow, with a progress bar.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/backend_open.h"
#include "core/bytes.h"
#include "cli/commands.h"
#include "cli/run_setup.h"
#include "graph/executor.h"
#include "memory/driver_lens.h"
#include "memory/telemetry.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {
namespace {

// One line, redrawn in place: the sampling node's bar and the overall node count.
class ProgressBar {
 public:
  ProgressBar(bool enabled, size_t total_nodes) : enabled_(enabled), total_(total_nodes) {}

  void on_event(const ExecEvent& e) {
    if (!enabled_) return;
    switch (e.kind) {
      case ExecEvent::Kind::CACHED:
        done_ += e.cached.size();
        break;
      case ExecEvent::Kind::EXECUTING:
        node_ = e.node_id + " " + e.class_type;
        value_ = max_ = 0;
        ++done_;
        start_ = std::chrono::steady_clock::now();
        draw();
        break;
      case ExecEvent::Kind::PROGRESS:
        value_ = e.value;
        max_ = e.max;
        draw();
        break;
      case ExecEvent::Kind::EXECUTED:
      case ExecEvent::Kind::MEMORY:  // printed by cmd_run whether or not the bar is drawn
      case ExecEvent::Kind::PREVIEW:
        break;
    }
  }
  void finish() {
    if (enabled_ && drawn_) std::fputc('\n', stderr);
  }

 private:
  void draw() {
    std::string line = fmt::format("[{}/{}] node {}", done_, total_, node_);
    if (max_ > 0) {
      const int width = 30;
      int fill = int(double(value_) / double(max_) * width);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      line += fmt::format(" [{}{}] {}/{} {:.1f}s ({:.2f} it/s)", std::string(size_t(fill), '#'),
                          std::string(size_t(width - fill), '.'), value_, max_, secs,
                          secs > 0 ? value_ / secs : 0.0);
    }
    std::fprintf(stderr, "\r%-110s", line.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  bool enabled_;
  size_t total_;
  size_t done_ = 0;
  std::string node_;
  int value_ = 0, max_ = 0;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

int cmd_run(const RunArgs& args) {
  Result<RunInputs> in = run_inputs_load(args);
  if (!in.ok()) {
    std::fprintf(stderr, "headroom: %s\n", in.status().message().c_str());
    return kExitInvalid;
  }
  Result<std::unique_ptr<Backend>> opened = backend_open(args.device, args.threads);
  if (!opened.ok()) {
    std::fprintf(stderr, "headroom: %s\n", opened.status().message().c_str());
    return kExitFailed;
  }
  std::unique_ptr<Backend> backend = std::move(opened).value();
  Result<DType> picked = compute_dtype_pick(args.dtype, *backend);
  if (!picked.ok()) {
    std::fprintf(stderr, "headroom: %s\n", picked.status().message().c_str());
    return kExitFailed;
  }
  const DType dtype = *picked;
  Result<MemoryPolicy> policy = memory_policy_resolve(args.memory, backend->info());
  if (!policy.ok()) {
    std::fprintf(stderr, "headroom: %s\n", policy.status().message().c_str());
    return kExitInvalid;
  }
  Allocator allocator(*backend, policy->budget);
  allocator.set_weights_cap(policy->weights_cap);
  allocator.set_pinned_budget(policy->pinned_budget);
  Executor executor(*backend, allocator);
  if (policy->mode == ResidencyMode::GPU_ONLY) {  // --gpu-only: never stream
    ResidencyOptions ro = executor.residency_options();
    ro.stream = false;
    executor.set_residency_options(ro);
  }
  // Both lenses sampled through the run (issue: telemetry shared by CLI, server, dashboard).
  Telemetry telemetry(allocator, DriverLens::open(*backend));
  telemetry.start();
  bool node_open = false;

  ExecOptions opts = run_exec_options(args, *in, *backend, allocator, executor, dtype);
  const Prompt& prompt = in->prompt;
  ProgressBar bar(!args.quiet && isatty(STDERR_FILENO), PromptExecutor::execution_order(prompt).size());
  opts.on_event = [&bar, &args, &telemetry, &node_open](const ExecEvent& e) {
    bar.on_event(e);
    if (e.kind == ExecEvent::Kind::EXECUTING) {
      if (node_open) telemetry.node_end();
      telemetry.node_begin(e.node_id + " " + e.class_type, 0);
      node_open = true;
    }
    if (e.kind == ExecEvent::Kind::MEMORY && !args.quiet)
      std::fprintf(stderr, "\nheadroom: node %s %s: %s\n", e.node_id.c_str(), e.class_type.c_str(),
                   e.message.c_str());
  };

  if (!args.quiet)
    std::fprintf(stderr, "headroom: running on %s in %s; budget %s (%s), residency %s\n",
                 backend->info().name.c_str(), dtype_name(dtype), bytes_format(policy->budget).c_str(),
                 policy->how.c_str(), residency_mode_name(policy->mode));
  auto t0 = std::chrono::steady_clock::now();
  PromptExecutor pe;
  Result<ExecResult> r = pe.execute(prompt, opts);
  bar.finish();
  if (node_open) telemetry.node_end();
  telemetry.stop();
  if (!r.ok()) {
    std::fprintf(stderr, "headroom: failed: %s\n", r.status().str().c_str());
    return kExitFailed;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& [id, ui] : r->ui_outputs) {
    if (!ui.contains("images")) continue;
    for (const Json& img : ui["images"]) {
      std::string dir = img["type"] == "temp" ? args.temp_dir : args.output_dir;
      std::string sub = img["subfolder"].get<std::string>();
      std::printf("%s/%s%s\n", dir.c_str(), sub.empty() ? "" : (sub + "/").c_str(),
                  img["filename"].get<std::string>().c_str());
    }
  }
  if (!args.quiet) {
    std::fprintf(stderr, "headroom: done in %.1f s\n", secs);
    for (const std::string& line : telemetry.summary_lines())
      std::fprintf(stderr, "headroom: %s\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace hr
