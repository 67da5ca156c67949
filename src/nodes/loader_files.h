// What the loader nodes share: a model folder's files as a combo input, a file's path by folder
// and name, and opening a safetensors file (headers only in a plan run).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "models/safetensors.h"
#include "nodes/nodes.h"
#include "workflow/execute.h"

namespace hr {

// A COMBO input listing the files of model folder `folder` (ComfyUI's folder names).
InputSpec file_combo(const std::string& name, const NodeEnv& env, const std::string& folder);
// The path of `name` in `folder` (an error naming both when it is not there).
Result<std::string> model_file(const ExecContext& ctx, const std::string& folder,
                               const std::string& name);
// The file, mapped; a plan run's loaders read headers only (Note [placeholder tensors] in
// core/tensor.h).
Result<std::shared_ptr<const SafetensorsFile>> open_file(const ExecContext& ctx,
                                                         const std::string& path);

}  // namespace hr
