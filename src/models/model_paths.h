// Where model files live: each model folder name ("checkpoints", "vae", ...) maps to an ordered
// list of directories, built from the models folder and any extra_model_paths.yaml files, the
// way ComfyUI's folder_paths does. Owns listing (combo options) and lookup (loading) by name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace hr {

// Note [model folder aliases]: ComfyUI renamed two folders and keeps the old names working:
// "unet" is "diffusion_models" and "clip" is "text_encoders" (folder_paths.map_legacy). Every
// ModelPaths entry point maps the name first, so a directory added under either name is
// searched for both, and <models_dir>/unet and <models_dir>/clip stay in the default lists.
std::string model_folder_canonical(const std::string& folder);

// Note [model names under link names]: a listed name is the path relative to the folder as
// the user sees it: the walk follows symlinked files and directories but names them by the
// link, never by the target, and lookup joins that name to the folder again, so a workflow
// naming "sd15.safetensors" loads through the link sd15.safetensors -> /data/big/v1-5.safetensors
// (ComfyUI: os.walk(followlinks=True) + relpath of the walked path). Broken links are skipped;
// a directory that links back to one of its own ancestors is not entered twice.
class ModelPaths {
 public:
  ModelPaths() = default;
  // ComfyUI's default layout under `models_dir` (checkpoints, vae, text_encoders + clip,
  // diffusion_models + unet, loras, embeddings, controlnet, upscale_models, configs, ...).
  static ModelPaths from_models_dir(const std::string& models_dir);
  // That layout plus each extra_model_paths.yaml in turn (--extra-model-paths-config).
  static Result<ModelPaths> from_config(const std::string& models_dir,
                                        const std::vector<std::string>& config_files);

  // Adds `dir` to `folder` (after alias mapping): at the end, or first when `is_default`
  // (a directory already present is not added twice; `is_default` moves it to the front).
  void add_folder_path(const std::string& folder, const std::string& dir, bool is_default = false);
  // Adds every folder of one extra_model_paths.yaml (ComfyUI's format: sections, each with an
  // optional base_path and is_default, and folder keys holding one path or a `|` block of
  // paths). INVALID_ARGUMENT naming the file and the key for bad YAML or a wrong type;
  // NOT_FOUND when the file cannot be read. On error nothing is added.
  Status add_config_file(const std::string& yaml_path);
  // The same for YAML text; relative paths are taken from `yaml_dir`, errors name `source`.
  Status add_config_text(const std::string& text, const std::string& yaml_dir,
                         const std::string& source);

  // The directories searched for `folder`, in order (empty for an unknown folder).
  std::vector<std::string> folder_dirs(const std::string& folder) const;
  // Every model file under any of `folder`'s directories (recursive, sorted, unique), by the
  // name relative to its directory (Note [model names under link names]). Only files with
  // the folder's extensions (.safetensors/.sft for model folders, .yaml for configs).
  std::vector<std::string> files(const std::string& folder) const;
  // The first <dir>/<name> over `folder`'s directories that is a file (through links), or
  // NOT_FOUND naming every place tried. INVALID_ARGUMENT for an absolute name or one with a
  // '..' component: a name never leaves its folder.
  Result<std::string> file_path(const std::string& folder, const std::string& name) const;

  // The models folder this was built from ("" when built empty); the CLIP tokenizer search
  // still looks there.
  const std::string& models_dir() const { return models_dir_; }
  // Every folder name and its directories, for `headroom models` and messages.
  const std::map<std::string, std::vector<std::string>>& folders() const { return dirs_; }

 private:
  std::string models_dir_;
  std::map<std::string, std::vector<std::string>> dirs_;  // canonical folder -> directories
};

}  // namespace hr
