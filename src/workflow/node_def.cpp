// Node registry and input-spec JSON (the /object_info shape).
#include "workflow/node_def.h"

#include <cmath>

namespace hr {

const char* io_type_name(IoType t) {
  switch (t) {
    case IoType::INT: return "INT";
    case IoType::FLOAT: return "FLOAT";
    case IoType::STRING: return "STRING";
    case IoType::BOOLEAN: return "BOOLEAN";
    case IoType::COMBO: return "COMBO";
    case IoType::MODEL: return "MODEL";
    case IoType::CLIP: return "CLIP";
    case IoType::VAE: return "VAE";
    case IoType::CONDITIONING: return "CONDITIONING";
    case IoType::LATENT: return "LATENT";
    case IoType::IMAGE: return "IMAGE";
    case IoType::MASK: return "MASK";
  }
  return "?";
}

bool io_type_is_widget(IoType t) {
  return t == IoType::INT || t == IoType::FLOAT || t == IoType::STRING || t == IoType::BOOLEAN ||
         t == IoType::COMBO;
}

Json InputSpec::config_json() const {
  Json opts = Json::object();
  switch (type) {
    case IoType::INT:
      opts["default"] = int64_t(default_number);
      if (min) opts["min"] = *min;
      if (max) opts["max"] = *max;
      opts["step"] = step;
      return Json::array({"INT", opts});
    case IoType::FLOAT:
      opts["default"] = default_number;
      if (min) opts["min"] = *min;
      if (max) opts["max"] = *max;
      opts["step"] = step;
      return Json::array({"FLOAT", opts});
    case IoType::STRING:
      opts["default"] = default_string;
      if (multiline) opts["multiline"] = true;
      return Json::array({"STRING", opts});
    case IoType::BOOLEAN:
      opts["default"] = default_bool;
      return Json::array({"BOOLEAN", opts});
    case IoType::COMBO: return Json::array({combo_options()});
    default: return Json::array({io_type_name(type)});
  }
}

const Json* NodeInputs::literal(const std::string& name) const {
  auto it = literals.find(name);
  return it == literals.end() ? nullptr : &it->second;
}
const std::any* NodeInputs::linked(const std::string& name) const {
  auto it = links.find(name);
  return it == links.end() ? nullptr : &it->second;
}
bool NodeInputs::has(const std::string& name) const {
  return literals.count(name) || links.count(name);
}
// Validation has already converted literals to their declared types (Note [validated literals]).
int64_t NodeInputs::get_int(const std::string& name) const {
  const Json* j = literal(name);
  if (!j) return 0;
  if (j->is_number_unsigned()) return int64_t(j->get<uint64_t>());
  return j->is_number() ? j->get<int64_t>() : 0;
}
double NodeInputs::get_float(const std::string& name) const {
  const Json* j = literal(name);
  return j && j->is_number() ? j->get<double>() : 0.0;
}
std::string NodeInputs::get_string(const std::string& name) const {
  const Json* j = literal(name);
  return j && j->is_string() ? j->get<std::string>() : std::string();
}
bool NodeInputs::get_bool(const std::string& name) const {
  const Json* j = literal(name);
  return j && j->is_boolean() ? j->get<bool>() : false;
}

const InputSpec* NodeDef::input(const std::string& name) const {
  for (const InputSpec& s : inputs)
    if (s.name == name) return &s;
  return nullptr;
}

void NodeRegistry::add(NodeDef def) {
  std::string key = def.class_type;
  defs_[key] = std::move(def);
}

const NodeDef* NodeRegistry::find(const std::string& class_type) const {
  auto it = defs_.find(class_type);
  return it == defs_.end() ? nullptr : &it->second;
}

std::vector<std::string> NodeRegistry::class_types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : defs_) out.push_back(k);
  return out;
}

Json NodeRegistry::object_info(const NodeDef& d) const {
  Json required = Json::object(), optional = Json::object();
  Json order_req = Json::array(), order_opt = Json::array();
  for (const InputSpec& s : d.inputs) {
    (s.required ? required : optional)[s.name] = s.config_json();
    (s.required ? order_req : order_opt).push_back(s.name);
  }
  Json input = {{"required", required}};
  if (!optional.empty()) input["optional"] = optional;
  Json out = Json::array(), names = Json::array(), is_list = Json::array();
  for (const OutputSpec& o : d.outputs) {
    out.push_back(io_type_name(o.type));
    names.push_back(o.name);
    is_list.push_back(false);
  }
  Json order = {{"required", order_req}};
  if (!order_opt.empty()) order["optional"] = order_opt;
  return Json{{"input", input},
              {"input_order", order},
              {"output", out},
              {"output_is_list", is_list},
              {"output_name", names},
              {"name", d.class_type},
              {"display_name", d.display_name.empty() ? d.class_type : d.display_name},
              {"description", d.description},
              {"category", d.category},
              {"output_node", d.output_node}};
}

Json NodeRegistry::object_info() const {
  Json all = Json::object();
  for (const auto& [k, d] : defs_) all[k] = object_info(d);
  return all;
}

}  // namespace hr
