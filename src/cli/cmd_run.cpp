// `headroom run`: validate and execute one API-format workflow, its progress on stderr
// (cli/progress/run_progress.h) and the PNG paths on stdout.
#include <unistd.h>

#include <cstdio>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/backend_open.h"
#include "core/bytes.h"
#include "cli/commands.h"
#include "cli/progress/console_line.h"
#include "cli/progress/run_progress.h"
#include "cli/run_setup.h"
#include "graph/executor.h"
#include "memory/device_profile_cache.h"
#include "memory/driver_lens.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/telemetry.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {

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
  Allocator allocator(*backend, policy->budget, eviction_policy());
  allocator.set_weights_cap(policy->weights_cap);
  allocator.set_pinned_budget(policy->pinned_budget);
  Executor executor(*backend, allocator, executor_policies_default(*backend));
  executor.set_device_profile(device_profile_load(*backend));  // Note [device profile]
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
  opts.unet_weights = policy->unet_weights;
  opts.text_encoder_weights = policy->text_encoder_weights;
  const Prompt& prompt = in->prompt;
  ConsoleLine console(isatty(STDERR_FILENO) != 0);
  RunProgress progress(console, PromptExecutor::execution_order(prompt).size());
  opts.on_event = [&progress, &args, &telemetry, &node_open](const ExecEvent& e) {
    if (e.kind == ExecEvent::Kind::EXECUTING) {
      if (node_open) telemetry.node_end();
      telemetry.node_begin(e.node_id + " " + e.class_type, 0);
      node_open = true;
    }
    if (!args.quiet) progress.on_event(e);
  };

  if (!args.quiet)
    std::fprintf(stderr, "headroom: running on %s in %s; budget %s (%s), residency %s\n",
                 backend->info().name.c_str(), dtype_name(dtype), bytes_format(policy->budget).c_str(),
                 policy->how.c_str(), residency_mode_name(policy->mode));
  PromptExecutor pe;
  Result<ExecResult> r = pe.execute(prompt, opts);
  if (!args.quiet) progress.finish(r.ok());
  if (node_open) telemetry.node_end();
  telemetry.stop();
  if (!r.ok()) {
    std::fprintf(stderr, "headroom: failed: %s\n", r.status().str().c_str());
    return kExitFailed;
  }
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
    for (const std::string& line : telemetry.summary_lines())
      std::fprintf(stderr, "headroom: %s\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace hr
