// Model folders (ComfyUI's folder_paths): the default layout, extra_model_paths.yaml, listing
// under link names and lookup by name.
#include "models/model_paths.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace hr {
namespace {

namespace fs = std::filesystem;

// The folders of ComfyUI's models directory, each with the subfolders searched for it.
struct DefaultFolder {
  const char* name;
  std::vector<const char*> subdirs;
};

const std::vector<DefaultFolder>& default_folders() {
  static const std::vector<DefaultFolder> folders = {
      {"checkpoints", {"checkpoints"}},
      {"configs", {"configs"}},
      {"loras", {"loras"}},
      {"vae", {"vae"}},
      {"text_encoders", {"text_encoders", "clip"}},  // Note [model folder aliases]
      {"diffusion_models", {"unet", "diffusion_models"}},
      {"clip_vision", {"clip_vision"}},
      {"style_models", {"style_models"}},
      {"embeddings", {"embeddings"}},
      {"diffusers", {"diffusers"}},
      {"vae_approx", {"vae_approx"}},
      {"controlnet", {"controlnet", "t2i_adapter"}},
      {"gligen", {"gligen"}},
      {"upscale_models", {"upscale_models"}},
      {"latent_upscale_models", {"latent_upscale_models"}},
      {"hypernetworks", {"hypernetworks"}},
      {"photomaker", {"photomaker"}},
      {"classifiers", {"classifiers"}},
      {"model_patches", {"model_patches"}},
      {"audio_encoders", {"audio_encoders"}},
  };
  return folders;
}

// headroom reads safetensors only, so model folders list nothing else; configs hold YAML.
bool extension_listed(const std::string& folder, const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (folder == "configs") return ext == ".yaml";
  return ext == ".safetensors" || ext == ".sft";
}

// One directory level of the walk (Note [model names under link names]). `ancestors` holds
// the resolved directories on the current path, so a link back to one of them is a loop.
void walk_dir(const fs::path& dir, const std::string& rel, const std::string& folder,
              std::vector<fs::path>& ancestors, std::vector<std::string>& out) {
  std::error_code ec;
  fs::path real = fs::canonical(dir, ec);
  if (ec || std::find(ancestors.begin(), ancestors.end(), real) != ancestors.end()) return;
  ancestors.push_back(real);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();  // dir/<entry name>: the link's name, not its target
    std::string name = p.filename().string();
    std::error_code sec;
    fs::file_status st = fs::status(p, sec);  // follows links; a broken one is not_found
    if (sec || !fs::exists(st)) continue;
    std::string child = rel.empty() ? name : rel + "/" + name;
    if (fs::is_directory(st)) {
      if (name != ".git") walk_dir(p, child, folder, ancestors, out);
    } else if (fs::is_regular_file(st) && extension_listed(folder, p)) {
      out.push_back(child);
    }
  }
  ancestors.pop_back();
}

// os.path.expanduser + expandvars: a leading ~ and $VAR / ${VAR} (unset variables stay).
std::string path_expand(const std::string& s) {
  std::string in = s;
  if (!in.empty() && in[0] == '~' && (in.size() == 1 || in[1] == '/')) {
    const char* home = std::getenv("HOME");
    if (home) in = std::string(home) + in.substr(1);
  }
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$') {
      out += in[i];
      continue;
    }
    size_t start = i + 1, stop = start;
    bool braced = start < in.size() && in[start] == '{';
    if (braced) {
      stop = in.find('}', start);
      if (stop == std::string::npos) {
        out += in.substr(i);
        break;
      }
    } else {
      while (stop < in.size() &&
             (std::isalnum(static_cast<unsigned char>(in[stop])) || in[stop] == '_'))
        ++stop;
    }
    std::string var =
        braced ? in.substr(start + 1, stop - start - 1) : in.substr(start, stop - start);
    const char* val = var.empty() ? nullptr : std::getenv(var.c_str());
    size_t last = braced ? stop : stop - 1;
    out += val ? std::string(val) : in.substr(i, last - i + 1);
    i = last;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// os.path.normpath: no "." or "a/.." parts and no trailing separator.
std::string path_normal(const fs::path& p) {
  std::string s = p.lexically_normal().generic_string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? "." : s;
}

const char* yaml_kind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return "a scalar";
    default:
      return "nothing";
  }
}

struct ConfigEntry {
  std::string folder, dir;
  bool is_default = false;
};

// Reads one section of an extra_model_paths.yaml into `out` (ComfyUI's
// utils/extra_config.load_extra_path_config).
Status config_section(const YAML::Node& conf, const std::string& section, const fs::path& yaml_dir,
                      const std::string& source, std::vector<ConfigEntry>& out) {
  if (conf.IsNull()) return Status::ok_status();
  if (!conf.IsMap())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: section '{}' must be a mapping of model folders to paths, not {}",
                      source, section, yaml_kind(conf));
  std::optional<fs::path> base;
  bool is_default = false;
  std::vector<std::pair<std::string, YAML::Node>> folders;
  for (auto it = conf.begin(); it != conf.end(); ++it) {
    if (!it->first.IsScalar())
      return make_error(ErrorCode::INVALID_ARGUMENT, "{}: section '{}' has a key that is {}",
                        source, section, yaml_kind(it->first));
    std::string key = it->first.Scalar();
    YAML::Node v = it->second;  // a copy: `it->` hands out a temporary
    if (key == "base_path") {
      if (v.IsNull()) continue;
      if (!v.IsScalar())
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "{}: section '{}', key 'base_path': expected a path, not {}", source,
                          section, yaml_kind(v));
      std::string b = trim(path_expand(trim(v.Scalar())));
      if (b.empty()) continue;
      fs::path bp(b);
      base = path_normal(bp.is_absolute() ? bp : yaml_dir / bp);
    } else if (key == "is_default") {
      if (v.IsNull()) continue;
      if (!v.IsScalar() || !YAML::convert<bool>::decode(v, is_default))
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "{}: section '{}', key 'is_default': expected true or false, not '{}'",
                          source, section, v.IsScalar() ? v.Scalar() : yaml_kind(v));
    } else {
      folders.emplace_back(key, v);
    }
  }
  for (const auto& [folder, v] : folders) {
    if (v.IsNull()) continue;  // `loras:` with nothing after it adds nothing
    if (!v.IsScalar())
      return make_error(
          ErrorCode::INVALID_ARGUMENT,
          "{}: section '{}', key '{}': expected a path or a `|` block of paths (one a "
          "line), not {}",
          source, section, folder, yaml_kind(v));
    std::istringstream lines(v.Scalar());
    for (std::string line; std::getline(lines, line);) {
      line = trim(line);
      if (line.empty()) continue;
      fs::path p(line);
      // Relative paths hang off base_path, or off the YAML file's folder when there is none.
      fs::path full = base ? *base / p : (p.is_absolute() ? p : yaml_dir / p);
      out.push_back(ConfigEntry{folder, path_normal(full), is_default});
    }
  }
  return Status::ok_status();
}

}  // namespace

std::string model_folder_canonical(const std::string& folder) {
  if (folder == "unet") return "diffusion_models";
  if (folder == "clip") return "text_encoders";
  return folder;
}

ModelPaths ModelPaths::from_models_dir(const std::string& models_dir) {
  ModelPaths mp;
  mp.models_dir_ = models_dir;
  for (const DefaultFolder& f : default_folders())
    for (const char* sub : f.subdirs)
      mp.add_folder_path(f.name, (fs::path(models_dir) / sub).string());
  return mp;
}

Result<ModelPaths> ModelPaths::from_config(const std::string& models_dir,
                                           const std::vector<std::string>& config_files) {
  ModelPaths mp = from_models_dir(models_dir);
  for (const std::string& f : config_files) HR_TRY(mp.add_config_file(f));
  return mp;
}

void ModelPaths::add_folder_path(const std::string& folder, const std::string& dir,
                                 bool is_default) {
  std::vector<std::string>& dirs = dirs_[model_folder_canonical(folder)];
  auto it = std::find(dirs.begin(), dirs.end(), dir);
  if (it != dirs.end()) {
    if (is_default) std::rotate(dirs.begin(), it, it + 1);
    return;
  }
  if (is_default)
    dirs.insert(dirs.begin(), dir);
  else
    dirs.push_back(dir);
}

Status ModelPaths::add_config_file(const std::string& yaml_path) {
  std::ifstream f(yaml_path);
  if (!f)
    return make_error(ErrorCode::NOT_FOUND, "cannot read extra model paths config '{}'", yaml_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::error_code ec;
  fs::path abs = fs::absolute(yaml_path, ec);
  return add_config_text(ss.str(), (ec ? fs::path(yaml_path) : abs).parent_path().string(),
                         yaml_path);
}

Status ModelPaths::add_config_text(const std::string& text, const std::string& yaml_dir,
                                   const std::string& source) {
  std::error_code ec;
  fs::path dir = fs::absolute(yaml_dir.empty() ? "." : yaml_dir, ec);
  if (ec) dir = yaml_dir;
  std::vector<ConfigEntry> entries;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return Status::ok_status();  // an empty file adds nothing
    if (!root.IsMap())
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "{}: expected a mapping of sections (name: {{base_path: ..., checkpoints: "
                        "...}}), not {}",
                        source, yaml_kind(root));
    for (auto it = root.begin(); it != root.end(); ++it) {
      std::string section = it->first.IsScalar() ? it->first.Scalar() : "?";
      HR_TRY(config_section(it->second, section, dir, source, entries));
    }
  } catch (const YAML::Exception& e) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: not valid YAML: {}", source, e.what());
  }
  for (const ConfigEntry& e : entries) add_folder_path(e.folder, e.dir, e.is_default);
  return Status::ok_status();
}

std::vector<std::string> ModelPaths::folder_dirs(const std::string& folder) const {
  auto it = dirs_.find(model_folder_canonical(folder));
  return it == dirs_.end() ? std::vector<std::string>{} : it->second;
}

std::vector<std::string> ModelPaths::files(const std::string& folder) const {
  std::string canonical = model_folder_canonical(folder);
  std::vector<std::string> out;
  for (const std::string& d : folder_dirs(canonical)) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    std::vector<fs::path> ancestors;
    walk_dir(d, "", canonical, ancestors, out);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::string> ModelPaths::file_path(const std::string& folder,
                                          const std::string& name) const {
  fs::path rel(name);
  if (name.empty() || rel.has_root_path())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "model name '{}' must be a path inside its folder", name);
  for (const fs::path& part : rel)
    if (part == "..")
      return make_error(ErrorCode::INVALID_ARGUMENT, "model name '{}' must not contain '..'", name);
  std::vector<std::string> dirs = folder_dirs(folder);
  if (dirs.empty())
    return make_error(ErrorCode::NOT_FOUND,
                      "model file '{}' not found: no directories for folder '{}'", name, folder);
  std::string tried;
  for (const std::string& d : dirs) {
    fs::path p = fs::path(d) / rel;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();  // through the link, by its name
    tried += (tried.empty() ? "" : ", ") + p.string();
    if (fs::is_symlink(fs::symlink_status(p, ec))) tried += " (a broken link)";
  }
  return make_error(ErrorCode::NOT_FOUND, "model file '{}' not found (looked at {})", name, tried);
}

}  // namespace hr
