// Node definitions: typed input specs (INT, FLOAT, STRING, BOOLEAN, COMBO with
// default/min/max/step; link types MODEL, CLIP, VAE, CONDITIONING, LATENT, IMAGE, MASK),
// outputs, and the function that runs a node. The registry serves validation, execution
// and /object_info.
#pragma once

#include <any>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hr {

using Json = nlohmann::json;

enum class IoType : uint8_t {
  INT,
  FLOAT,
  STRING,
  BOOLEAN,
  COMBO,
  MODEL,
  CLIP,
  VAE,
  CONDITIONING,
  LATENT,
  IMAGE,
  MASK,
};
const char* io_type_name(IoType t);  // ComfyUI's spelling: "INT", "MODEL", ...
bool io_type_is_widget(IoType t);    // literal values (not links)

struct InputSpec {
  std::string name;
  IoType type = IoType::INT;
  bool required = true;
  // INT / FLOAT
  double default_number = 0;
  std::optional<double> min, max;
  double step = 1;
  bool enforce_step = false;  // reject values that are not multiples of step (pixel sizes)
  // STRING / BOOLEAN
  std::string default_string;
  bool default_bool = false;
  bool multiline = false;
  // COMBO: fixed options, or a function listing them at validation time (model files).
  std::vector<std::string> options;
  std::function<std::vector<std::string>()> options_fn;

  std::vector<std::string> combo_options() const { return options_fn ? options_fn() : options; }
  Json config_json() const;  // ComfyUI's input_config ["INT", {"default":..}]
};

struct OutputSpec {
  IoType type;
  std::string name;
};

// Resolved inputs of one node: literals as JSON, linked values as std::any.
class NodeInputs {
 public:
  const Json* literal(const std::string& name) const;
  const std::any* linked(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  bool has(const std::string& name) const;
  // The linked value cast to T; nullptr when absent or of another type.
  template <typename T>
  const T* get(const std::string& name) const {
    const std::any* a = linked(name);
    return a ? std::any_cast<T>(a) : nullptr;
  }

  std::map<std::string, Json> literals;
  std::map<std::string, std::any> links;
};

struct ExecContext;  // workflow/execute.h

using NodeRunFn = std::function<Result<std::vector<std::any>>(ExecContext& ctx, const NodeInputs& in)>;

struct NodeDef {
  std::string class_type;
  std::string display_name;
  std::string category;
  std::string description;
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
  bool output_node = false;
  NodeRunFn run;

  const InputSpec* input(const std::string& name) const;
};

class NodeRegistry {
 public:
  void add(NodeDef def);
  const NodeDef* find(const std::string& class_type) const;
  std::vector<std::string> class_types() const;
  // ComfyUI's /object_info for one class.
  Json object_info(const NodeDef& def) const;
  Json object_info() const;

 private:
  std::map<std::string, NodeDef> defs_;
};

}  // namespace hr
