// Registers the ComfyUI core nodes headroom implements (class names, inputs and outputs as
// ComfyUI declares them).
#pragma once

#include <string>
#include <vector>

#include "workflow/node_def.h"

namespace hr {

// ComfyUI's MAX_RESOLUTION: the largest pixel size any node accepts.
constexpr double kMaxResolution = 16384;

struct NodeEnv {
  std::string models_dir = "models";
  std::string input_dir = "input";
};

void nodes_register(NodeRegistry& registry, const NodeEnv& env);

// Files under <models_dir>/<folder> for each folder (recursive, relative, sorted), with the
// extensions model loaders accept (.safetensors, .sft).
std::vector<std::string> model_files(const std::string& models_dir,
                                     const std::vector<std::string>& folders);
// The first <models_dir>/<folder>/<name> that exists, or NOT_FOUND naming every place tried.
Result<std::string> model_path(const std::string& models_dir,
                               const std::vector<std::string>& folders, const std::string& name);

// Per-family node registrations (nodes_*.cpp).
void nodes_register_loaders(NodeRegistry& r, const NodeEnv& env);
void nodes_register_conditioning(NodeRegistry& r, const NodeEnv& env);
void nodes_register_sampling(NodeRegistry& r, const NodeEnv& env);
void nodes_register_images(NodeRegistry& r, const NodeEnv& env);

// Small builders for input specs.
InputSpec spec_int(const std::string& name, double def, double min, double max, double step = 1);
InputSpec spec_float(const std::string& name, double def, double min, double max, double step);
InputSpec spec_string(const std::string& name, const std::string& def, bool multiline = false);
InputSpec spec_combo(const std::string& name, std::vector<std::string> options);
InputSpec spec_link(const std::string& name, IoType type);

}  // namespace hr
