// Node registration entry point, the model folders nodes see and input-spec builders.
#include "nodes/nodes.h"

#include "workflow/execute.h"

namespace hr {

void nodes_register(NodeRegistry& r, const NodeEnv& env) {
  nodes_register_loaders(r, env);
  nodes_register_lora(r, env);
  nodes_register_conditioning(r, env);
  nodes_register_sampling(r, env);
  nodes_register_flux(r, env);
  nodes_register_model_advanced(r, env);
  nodes_register_images(r, env);
  nodes_register_latent(r, env);
}

std::shared_ptr<const ModelPaths> model_paths_of(const NodeEnv& env) {
  if (env.model_paths) return env.model_paths;
  return std::make_shared<const ModelPaths>(ModelPaths::from_models_dir(env.models_dir));
}

std::shared_ptr<const ModelPaths> model_paths_of(const ExecOptions& opts) {
  if (opts.model_paths) return opts.model_paths;
  return std::make_shared<const ModelPaths>(ModelPaths::from_models_dir(opts.models_dir));
}

InputSpec spec_int(const std::string& name, double def, double min, double max, double step) {
  InputSpec s{.name = name, .type = IoType::INT};
  s.default_number = def;
  s.min = min;
  s.max = max;
  s.step = step;
  return s;
}

InputSpec spec_float(const std::string& name, double def, double min, double max, double step) {
  InputSpec s{.name = name, .type = IoType::FLOAT};
  s.default_number = def;
  s.min = min;
  s.max = max;
  s.step = step;
  return s;
}

InputSpec spec_string(const std::string& name, const std::string& def, bool multiline) {
  InputSpec s{.name = name, .type = IoType::STRING};
  s.default_string = def;
  s.multiline = multiline;
  return s;
}

InputSpec spec_combo(const std::string& name, std::vector<std::string> options) {
  InputSpec s{.name = name, .type = IoType::COMBO};
  s.options = std::move(options);
  return s;
}

InputSpec spec_link(const std::string& name, IoType type) {
  return InputSpec{.name = name, .type = type};
}

}  // namespace hr
