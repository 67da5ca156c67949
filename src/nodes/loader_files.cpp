// Loader helpers: folder combos, file paths, opening files.
#include "nodes/loader_files.h"

namespace hr {

InputSpec file_combo(const std::string& name, const NodeEnv& env, const std::string& folder) {
  InputSpec s{.name = name, .type = IoType::COMBO};
  std::shared_ptr<const ModelPaths> paths = model_paths_of(env);
  s.options_fn = [paths, folder] { return paths->files(folder); };
  return s;
}

Result<std::string> model_file(const ExecContext& ctx, const std::string& folder,
                               const std::string& name) {
  return model_paths_of(ctx.opts)->file_path(folder, name);
}

// A plan run's loaders read headers only (Note [placeholder tensors] in core/tensor.h).
Result<std::shared_ptr<const SafetensorsFile>> open_file(const ExecContext& ctx,
                                                        const std::string& path) {
  const TensorData data = ctx.opts.plan_run ? TensorData::PLACEHOLDERS : TensorData::READ;
  HR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path, data));
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

}  // namespace hr
