// The setup of a workflow run shared by `headroom run` and `headroom bench`.
#include "cli/run_setup.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "models/model_paths.h"
#include "nodes/nodes.h"

namespace hr {
namespace {

Result<std::string> workflow_read(const std::string& path) {
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

Result<RunInputs> run_inputs_load(const RunArgs& args) {
  HR_ASSIGN_OR_RETURN(std::string text, workflow_read(args.workflow));
  if (!args.clip_tokenizer.empty())
    setenv("HEADROOM_CLIP_TOKENIZER", args.clip_tokenizer.c_str(), 1);
  HR_ASSIGN_OR_RETURN(ModelPaths paths,
                      ModelPaths::from_config(args.models_dir, args.extra_model_paths));
  RunInputs in;
  in.model_paths = std::make_shared<const ModelPaths>(std::move(paths));
  in.registry = std::make_unique<NodeRegistry>();
  nodes_register(*in.registry, NodeEnv{args.models_dir, args.input_dir, in.model_paths});
  PromptValidation v = prompt_validate_text(text, *in.registry);
  if (!v.ok) return Status(ErrorCode::INVALID_ARGUMENT, "the workflow is invalid\n" + v.summary());
  in.prompt = std::move(v.prompt);
  return in;
}

ExecOptions run_exec_options(const RunArgs& args, const RunInputs& inputs, Backend& backend,
                             Allocator& allocator, Executor& executor, DType dtype) {
  ExecOptions opts;
  opts.models_dir = args.models_dir;
  opts.model_paths = inputs.model_paths;
  opts.output_dir = args.output_dir;
  opts.input_dir = args.input_dir;
  opts.temp_dir = args.temp_dir;
  opts.backend = &backend;
  opts.allocator = &allocator;
  opts.executor = &executor;
  opts.compute_dtype = dtype;
  opts.dtype_auto = args.dtype == "auto";
  return opts;
}

}  // namespace hr
