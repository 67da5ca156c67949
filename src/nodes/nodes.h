// Registers the ComfyUI core nodes headroom implements (class names, inputs and outputs as
// ComfyUI declares them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model_paths.h"
#include "workflow/node_def.h"

namespace hr {

struct ExecOptions;

// ComfyUI's MAX_RESOLUTION: the largest pixel size any node accepts.
constexpr double kMaxResolution = 16384;

struct NodeEnv {
  std::string models_dir = "models";
  std::string input_dir = "input";
  // Where loaders list their files (combo options); null: ComfyUI's layout under models_dir.
  std::shared_ptr<const ModelPaths> model_paths;
};

void nodes_register(NodeRegistry& registry, const NodeEnv& env);

// The model folders nodes see: model_paths, or ComfyUI's layout under models_dir when null.
std::shared_ptr<const ModelPaths> model_paths_of(const NodeEnv& env);
std::shared_ptr<const ModelPaths> model_paths_of(const ExecOptions& opts);

// Per-family node registrations (nodes_*.cpp).
void nodes_register_loaders(NodeRegistry& r, const NodeEnv& env);
void nodes_register_lora(NodeRegistry& r, const NodeEnv& env);
void nodes_register_conditioning(NodeRegistry& r, const NodeEnv& env);
void nodes_register_sampling(NodeRegistry& r, const NodeEnv& env);
void nodes_register_flux(NodeRegistry& r, const NodeEnv& env);
void nodes_register_model_advanced(NodeRegistry& r, const NodeEnv& env);
void nodes_register_images(NodeRegistry& r, const NodeEnv& env);
void nodes_register_latent(NodeRegistry& r, const NodeEnv& env);

// Small builders for input specs.
InputSpec spec_int(const std::string& name, double def, double min, double max, double step = 1);
InputSpec spec_float(const std::string& name, double def, double min, double max, double step);
InputSpec spec_string(const std::string& name, const std::string& def, bool multiline = false);
InputSpec spec_combo(const std::string& name, std::vector<std::string> options);
InputSpec spec_link(const std::string& name, IoType type);

}  // namespace hr
