// The compute side that `headroom serve` and `headroom worker` both own: backend, compute dtype,
// preview method, memory policy, the budgeted allocator, the executor and the telemetry, made
// from the same options; and the JobRuntime that runs jobs on them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "jobs/job_execution.h"
#include "memory/budget.h"
#include "jobs/memory_levels.h"
#include "memory/telemetry.h"
#include "sampling/latent_preview.h"

namespace hr {

struct ComputeChoice {
  std::string device;          // auto, cpu, cuda, cuda:N
  int threads = 0;             // CPU threads (0: all)
  std::string dtype;           // auto, f32, f16, bf16
  std::string preview_method;  // none, auto, latent2rgb
  MemoryArgs memory;
};

struct ComputeStack {
  std::unique_ptr<Backend> backend;
  DType dtype = DType::F32;
  bool dtype_auto = false;  // --dtype auto (Note [family compute dtype] in models/checkpoint.cpp)
  PreviewMethod preview = PreviewMethod::NONE;
  MemoryPolicy policy;
  std::unique_ptr<Allocator> allocator;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<Telemetry> telemetry;
  MemoryLevels levels;
};

Status compute_stack_open(const ComputeChoice& choice, ComputeStack& s);

struct RuntimeFolders {
  std::string models_dir, output_dir, input_dir, temp_dir;
};

// Creates the output, input and temp folders, reads the model folders (with ComfyUI's
// extra_model_paths files) and registers the nodes over them: the start of `serve` and `worker`.
Status runtime_folders_prepare(const RuntimeFolders& folders,
                               const std::vector<std::string>& extra_model_paths,
                               std::shared_ptr<const ModelPaths>& model_paths,
                               NodeRegistry& registry);

// A runtime over `s` (its levels and telemetry included) with the node registry and folders.
JobRuntime compute_runtime(ComputeStack& s, const NodeRegistry& registry,
                           std::shared_ptr<const ModelPaths> model_paths,
                           const RuntimeFolders& folders, int threads);

}  // namespace hr
