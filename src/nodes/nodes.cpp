// Node registration entry point, model-file discovery and input-spec builders.
#include "nodes/nodes.h"

#include <algorithm>
#include <filesystem>

namespace hr {

void nodes_register(NodeRegistry& r, const NodeEnv& env) {
  nodes_register_loaders(r, env);
  nodes_register_conditioning(r, env);
  nodes_register_sampling(r, env);
  nodes_register_images(r, env);
}

std::vector<std::string> model_files(const std::string& models_dir,
                                     const std::vector<std::string>& folders) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& f : folders) {
    fs::path root = fs::path(models_dir) / f;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      std::string ext = it->path().extension().string();
      if (ext != ".safetensors" && ext != ".sft") continue;
      out.push_back(fs::relative(it->path(), root, ec).generic_string());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::string> model_path(const std::string& models_dir,
                               const std::vector<std::string>& folders, const std::string& name) {
  namespace fs = std::filesystem;
  std::string tried;
  if (name.find("..") != std::string::npos)
    return make_error(ErrorCode::INVALID_ARGUMENT, "model name '{}' must not contain '..'", name);
  for (const std::string& f : folders) {
    fs::path p = fs::path(models_dir) / f / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  return make_error(ErrorCode::NOT_FOUND, "model file '{}' not found (looked at {})", name, tried);
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
