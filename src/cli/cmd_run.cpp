// `headroom run`: validate and execute one API-format workflow, with a progress bar.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/bytes.h"
#include "cli/commands.h"
#include "graph/executor.h"
#include "memory/driver_lens.h"
#include "memory/telemetry.h"
#include "nodes/model_paths.h"
#include "nodes/nodes.h"
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

Result<std::string> read_workflow(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream f(path);
    if (!f) return make_error(ErrorCode::NOT_FOUND, "cannot open workflow file '{}'", path);
    ss << f.rdbuf();
  }
  return ss.str();
}

}  // namespace

int cmd_run(const RunArgs& args) {
  Result<std::string> text = read_workflow(args.workflow);
  if (!text.ok()) {
    std::fprintf(stderr, "headroom: %s\n", text.status().message().c_str());
    return kExitInvalid;
  }
  if (!args.clip_tokenizer.empty()) setenv("HEADROOM_CLIP_TOKENIZER", args.clip_tokenizer.c_str(), 1);

  Result<ModelPaths> paths = ModelPaths::from_config(args.models_dir, args.extra_model_paths);
  if (!paths.ok()) {
    std::fprintf(stderr, "headroom: %s\n", paths.status().message().c_str());
    return kExitInvalid;
  }
  auto model_paths = std::make_shared<const ModelPaths>(std::move(paths).value());

  NodeRegistry registry;
  nodes_register(registry, NodeEnv{args.models_dir, args.input_dir, model_paths});
  PromptValidation v = prompt_validate_text(*text, registry);
  if (!v.ok) {
    std::fprintf(stderr, "headroom: the workflow is invalid\n%s", v.summary().c_str());
    return kExitInvalid;
  }

  std::unique_ptr<Backend> backend;
  if (args.device == "cuda" || args.device == "auto") {
    Result<std::unique_ptr<Backend>> cuda = cuda_backend_create(0);
    if (cuda.ok()) {
      backend = std::move(cuda).value();
    } else if (args.device == "cuda") {
      std::fprintf(stderr, "headroom: --device cuda: %s\n", cuda.status().message().c_str());
      return kExitFailed;
    }
  }
  if (!backend) backend = cpu_backend_create(args.threads);
  DType dtype = DType::F32;
  if (args.dtype == "auto") dtype = backend->host_visible() ? DType::F32 : DType::F16;
  else dtype = *dtype_from_name(args.dtype);
  if (!backend->op_supported(OpKind::CONV2D, dtype)) {
    std::fprintf(stderr, "headroom: device %s does not compute in %s; use --dtype f32\n",
                 backend->info().name.c_str(), dtype_name(dtype));
    return kExitFailed;
  }
  Result<MemoryPolicy> policy = memory_policy_resolve(args.memory, backend->info());
  if (!policy.ok()) {
    std::fprintf(stderr, "headroom: %s\n", policy.status().message().c_str());
    return kExitInvalid;
  }
  Allocator allocator(*backend, policy->budget);
  allocator.set_weights_cap(policy->weights_cap);
  allocator.set_pinned_budget(policy->pinned_budget);
  Executor executor(*backend, allocator);
  // Both lenses sampled through the run (issue: telemetry shared by CLI, server, dashboard).
  Telemetry telemetry(allocator, DriverLens::open(*backend));
  telemetry.start();
  bool node_open = false;

  ExecOptions opts;
  opts.models_dir = args.models_dir;
  opts.model_paths = model_paths;
  opts.output_dir = args.output_dir;
  opts.input_dir = args.input_dir;
  opts.temp_dir = args.temp_dir;
  opts.backend = backend.get();
  opts.allocator = &allocator;
  opts.executor = &executor;
  opts.compute_dtype = dtype;
  ProgressBar bar(!args.quiet && isatty(STDERR_FILENO), PromptExecutor::execution_order(v.prompt).size());
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
  Result<ExecResult> r = pe.execute(v.prompt, opts);
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

int cmd_probe() {
  auto cpu = cpu_backend_create();
  DeviceInfo ci = cpu->info();
  std::printf("device cpu: %s, %.1f GiB RAM (%.1f GiB free)\n", ci.name.c_str(),
              double(ci.memory_total) / double(1ull << 30), double(ci.memory_free) / double(1ull << 30));
  auto cuda = cuda_backend_create(0);
  if (cuda.ok()) {
    DeviceInfo gi = (*cuda)->info();
    std::printf("device cuda:%d: %s, %.1f GiB VRAM (%.1f GiB free, driver level)\n", gi.index,
                gi.name.c_str(), double(gi.memory_total) / double(1ull << 30),
                double(gi.memory_free) / double(1ull << 30));
  } else {
    std::printf("device cuda: none (%s)\n", cuda.status().message().c_str());
  }
  return 0;
}

}  // namespace hr
