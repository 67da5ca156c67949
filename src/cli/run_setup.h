// What `headroom run` and `headroom bench` share: the workflow read and validated, the backend
// and compute dtype chosen, and the ExecOptions of one run, so that both run a prompt the same way.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/status.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {

class ModelPaths;

struct RunInputs {
  std::shared_ptr<const ModelPaths> model_paths;
  std::unique_ptr<NodeRegistry> registry;  // the prompt's nodes point into it
  Prompt prompt;                           // validated
};

// Reads the workflow (file or "-"), the model folders and validates. INVALID_ARGUMENT carries
// ComfyUI's validation summary; NOT_FOUND an unreadable file.
Result<RunInputs> run_inputs_load(const RunArgs& args);

// --device auto|cpu|cuda: auto takes the GPU when there is one.
Result<std::unique_ptr<Backend>> run_backend_open(const std::string& device, int threads);

// --dtype auto (f32 on the CPU, f16 on a GPU) or a name; UNSUPPORTED when the backend cannot
// compute in it.
Result<DType> run_dtype_pick(const std::string& name, const Backend& backend);

// The options of one run of `inputs` (on_event left empty).
ExecOptions run_exec_options(const RunArgs& args, const RunInputs& inputs, Backend& backend,
                             Allocator& allocator, Executor& executor, DType dtype);

}  // namespace hr
