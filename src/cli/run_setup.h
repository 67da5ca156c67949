// What `headroom run` and `headroom bench` share: the workflow read and validated, and the
// ExecOptions of one run, so that both run a prompt the same way (the backend and dtype come
// from backend/backend_open.h, as for `headroom serve`).
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

// The options of one run of `inputs` (on_event left empty).
ExecOptions run_exec_options(const RunArgs& args, const RunInputs& inputs, Backend& backend,
                             Allocator& allocator, Executor& executor, DType dtype);

}  // namespace hr
