// Prompt validation following ComfyUI's validate_prompt / validate_inputs.
#include "workflow/prompt.h"

#include <cmath>
#include <functional>
#include <set>

#include "core/json_parse.h"

namespace hr {
namespace {

Json top_error(const std::string& type, const std::string& message, const std::string& details) {
  return Json{{"error",
               {{"type", type},
                {"message", message},
                {"details", details},
                {"extra_info", Json::object()}}},
              {"node_errors", Json::object()}};
}

Json input_error(const std::string& type, const std::string& message, const std::string& details,
                 Json extra) {
  return Json{{"type", type}, {"message", message}, {"details", details}, {"extra_info", extra}};
}

std::string num_str(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e18) return std::to_string(int64_t(v));
  return fmt::format("{}", v);
}

// Converts a literal to the spec's type as ComfyUI does (int(), float(), str(), bool()).
// Returns false with `why` when the value cannot be converted.
bool convert_literal(const InputSpec& spec, const Json& in, Json& out, std::string& why) {
  switch (spec.type) {
    case IoType::INT: {
      if (in.is_number_integer()) {
        out = in;
        return true;
      }
      if (in.is_number_float()) {
        double d = in.get<double>();
        if (!std::isfinite(d)) break;
        if (std::fabs(d) >= 0x1p63) {  // int64_t(d) would be undefined
          why = fmt::format("{} is out of the 64-bit integer range", num_str(d));
          return false;
        }
        out = int64_t(std::trunc(d));
        return true;
      }
      if (in.is_boolean()) {
        out = int64_t(in.get<bool>());
        return true;
      }
      if (in.is_string()) {
        const std::string s = in.get<std::string>();
        try {
          size_t pos = 0;
          long long v = std::stoll(s, &pos);
          if (pos == s.size()) {
            out = int64_t(v);
            return true;
          }
        } catch (...) {
        }
        why = fmt::format("invalid literal for int() with base 10: '{}'", s);
        return false;
      }
      break;
    }
    case IoType::FLOAT: {
      if (in.is_number()) {
        out = in.get<double>();
        return true;
      }
      if (in.is_string()) {
        const std::string s = in.get<std::string>();
        try {
          size_t pos = 0;
          double v = std::stod(s, &pos);
          if (pos == s.size()) {
            out = v;
            return true;
          }
        } catch (...) {
        }
        why = fmt::format("could not convert string to float: '{}'", s);
        return false;
      }
      break;
    }
    case IoType::STRING:
      out = in.is_string() ? in : Json(in.dump());
      return true;
    case IoType::BOOLEAN:
      if (in.is_boolean()) {
        out = in;
        return true;
      }
      if (in.is_number()) {
        out = in.get<double>() != 0;
        return true;
      }
      break;
    case IoType::COMBO:
      out = in;
      return true;
    default: break;
  }
  why = fmt::format("{} is not a valid {} value", in.dump(), io_type_name(spec.type));
  return false;
}

struct Validator {
  const Json& src;
  const NodeRegistry& reg;
  Prompt& prompt;
  std::map<std::string, bool> done;  // id -> valid
  std::set<std::string> visiting;
  std::map<std::string, Json> errors;  // id -> errors[]
  std::vector<std::string> cycle;

  bool node(const std::string& id) {
    if (auto it = done.find(id); it != done.end()) return it->second;
    if (visiting.count(id)) {
      if (cycle.empty()) cycle.push_back(id);
      return false;
    }
    visiting.insert(id);
    bool valid = check(id);
    visiting.erase(id);
    done[id] = valid;
    return valid;
  }

  void add(const std::string& id, Json e) {
    if (!errors.count(id)) errors[id] = Json::array();
    errors[id].push_back(std::move(e));
  }

  bool check(const std::string& id) {
    PromptNode& pn = prompt.nodes.at(id);
    const NodeDef& def = *pn.def;
    const Json raw = src[id].contains("inputs") && src[id]["inputs"].is_object()
                         ? src[id]["inputs"]
                         : Json::object();
    bool valid = true;
    for (const InputSpec& spec : def.inputs) {
      Json extra = {{"input_name", spec.name}, {"input_config", spec.config_json()}};
      if (!raw.contains(spec.name)) {
        if (spec.required) {
          add(id, input_error("required_input_missing", "Required input is missing", spec.name,
                              {{"input_name", spec.name}}));
          valid = false;
        }
        continue;
      }
      const Json& val = raw[spec.name];
      if (val.is_array()) {
        extra["received_value"] = val;
        if (!json_is_link(val)) {
          add(id, input_error("bad_linked_input",
                              "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                              spec.name, extra));
          valid = false;
          continue;
        }
        std::string up = val[0].is_string() ? val[0].get<std::string>() : val[0].dump();
        int64_t slot = val[1].get<int64_t>();
        auto upn = prompt.nodes.find(up);
        if (upn == prompt.nodes.end()) {
          add(id, input_error("bad_linked_input", "Linked node does not exist",
                              fmt::format("{}: node '{}' is not in the prompt", spec.name, up),
                              extra));
          valid = false;
          continue;
        }
        const NodeDef& udef = *upn->second.def;
        if (slot < 0 || size_t(slot) >= udef.outputs.size()) {
          add(id, input_error("bad_linked_input", "Linked output index is out of range",
                              fmt::format("{}: node '{}' ({}) has {} outputs, index {} requested",
                                          spec.name, up, udef.class_type, udef.outputs.size(),
                                          slot),
                              extra));
          valid = false;
          continue;
        }
        IoType received = udef.outputs[size_t(slot)].type;
        bool match = received == spec.type ||
                     (spec.type == IoType::COMBO && received == IoType::STRING);
        if (!match) {
          Json ex = {{"input_name", spec.name},
                     {"input_config", spec.config_json()},
                     {"received_type", io_type_name(received)},
                     {"linked_node", val}};
          add(id, input_error("return_type_mismatch", "Return type mismatch between linked nodes",
                              fmt::format("{}, received_type({}) mismatch input_type({})",
                                          spec.name, io_type_name(received),
                                          io_type_name(spec.type)),
                              ex));
          valid = false;
          continue;
        }
        if (!node(up)) valid = false;
        pn.inputs[spec.name] = Json::array({up, slot});
        continue;
      }
      extra["received_value"] = val;
      if (!io_type_is_widget(spec.type)) {
        add(id, input_error("invalid_input_type",
                            fmt::format("Failed to convert an input value to a {} value",
                                        io_type_name(spec.type)),
                            fmt::format("{}, {}, a {} input must be a link [node_id, output_index]",
                                        spec.name, val.dump(), io_type_name(spec.type)),
                            extra));
        valid = false;
        continue;
      }
      Json conv;
      std::string why;
      if (!convert_literal(spec, val, conv, why)) {
        extra["exception_message"] = why;
        add(id, input_error("invalid_input_type",
                            fmt::format("Failed to convert an input value to a {} value",
                                        io_type_name(spec.type)),
                            fmt::format("{}, {}, {}", spec.name, val.dump(), why), extra));
        valid = false;
        continue;
      }
      if (spec.type == IoType::INT || spec.type == IoType::FLOAT) {
        double v = conv.get<double>();
        if (spec.min && v < *spec.min) {
          add(id, input_error("value_smaller_than_min",
                              fmt::format("Value {} smaller than min of {}", num_str(v),
                                          num_str(*spec.min)),
                              spec.name, extra));
          valid = false;
          continue;
        }
        if (spec.max && v > *spec.max) {
          add(id, input_error("value_bigger_than_max",
                              fmt::format("Value {} bigger than max of {}", num_str(v),
                                          num_str(*spec.max)),
                              spec.name, extra));
          valid = false;
          continue;
        }
      }
      if (spec.type == IoType::INT && spec.enforce_step && spec.step > 1 &&
          conv.get<int64_t>() % int64_t(spec.step) != 0) {
        add(id, input_error("custom_validation_failed",
                            fmt::format("Value {} is not a multiple of {}", conv.get<int64_t>(),
                                        int64_t(spec.step)),
                            spec.name, extra));
        valid = false;
        continue;
      }
      if (spec.type == IoType::COMBO) {
        std::vector<std::string> opts = spec.combo_options();
        bool found = false;
        if (conv.is_string())
          for (const std::string& o : opts)
            if (o == conv.get<std::string>()) found = true;
        if (!found) {
          Json list = opts;
          add(id, input_error("value_not_in_list", "Value not in list",
                              fmt::format("{}: {} not in {}", spec.name, val.dump(), list.dump()),
                              extra));
          valid = false;
          continue;
        }
      }
      pn.inputs[spec.name] = conv;
    }
    return valid;
  }
};

}  // namespace

bool json_is_link(const Json& v) {
  return v.is_array() && v.size() == 2 && (v[0].is_string() || v[0].is_number_integer()) &&
         v[1].is_number_integer();
}

std::string PromptValidation::summary() const {
  if (ok) return "ok";
  std::string s;
  const Json& e = error["error"];
  s += fmt::format("{}: {}", e.value("type", ""), e.value("message", ""));
  if (e.contains("details") && !e["details"].get<std::string>().empty())
    s += fmt::format(" ({})", e["details"].get<std::string>());
  s += "\n";
  for (const auto& [id, ne] : error["node_errors"].items()) {
    for (const Json& err : ne["errors"])
      s += fmt::format("  node {} ({}): {}: {}: {}\n", id, ne.value("class_type", ""),
                       err.value("type", ""), err.value("message", ""), err.value("details", ""));
  }
  return s;
}

PromptValidation prompt_validate_text(const std::string& text, const NodeRegistry& registry) {
  Result<Json> j = json_parse(text);
  if (!j.ok()) {
    PromptValidation v;
    v.error = top_error("invalid_prompt", "Invalid prompt: the workflow is not valid JSON",
                        j.status().message() + " (API-format workflow expected)");
    return v;
  }
  return prompt_validate(*j, registry);
}

PromptValidation prompt_validate(const Json& src, const NodeRegistry& registry) {
  PromptValidation v;
  if (!src.is_object()) {
    v.error = top_error("invalid_prompt", "Invalid prompt: the prompt must be a JSON object",
                        "expected {\"<node id>\": {\"class_type\": ..., \"inputs\": {...}}}");
    return v;
  }
  Prompt& p = v.prompt;
  p.source = src;
  for (const auto& [id, node] : src.items()) {
    if (!node.is_object() || !node.contains("class_type") || !node["class_type"].is_string()) {
      v.error = top_error("invalid_prompt",
                          "Cannot execute because a node is missing the class_type property.",
                          fmt::format("Node ID '#{}'", id));
      return v;
    }
    std::string ct = node["class_type"].get<std::string>();
    const NodeDef* def = registry.find(ct);
    if (!def) {
      v.error = top_error("invalid_prompt",
                          fmt::format("Cannot execute because node {} does not exist.", ct),
                          fmt::format("Node ID '#{}'", id));
      return v;
    }
    p.nodes[id] = PromptNode{id, ct, def, Json::object()};
    if (def->output_node) p.outputs.push_back(id);
  }
  if (p.outputs.empty()) {
    v.error = top_error("prompt_no_outputs", "Prompt has no outputs", "");
    return v;
  }
  Validator val{src, registry, p, {}, {}, {}, {}};
  std::map<std::string, std::set<std::string>> dependents;  // node -> outputs needing it
  for (const std::string& out : p.outputs) val.node(out);
  if (!val.cycle.empty()) {
    v.error = top_error("invalid_prompt", "Dependency cycle detected",
                        fmt::format("node '{}' depends on its own output", val.cycle[0]));
    return v;
  }
  // Which outputs depend on which nodes, for node_errors[].dependent_outputs.
  std::function<void(const std::string&, const std::string&, std::set<std::string>&)> walk =
      [&](const std::string& id, const std::string& out, std::set<std::string>& seen) {
        if (!seen.insert(id).second) return;
        dependents[id].insert(out);
        for (const auto& [k, in] : p.nodes.at(id).inputs.items())
          if (json_is_link(in) && p.nodes.count(in[0].get<std::string>()))
            walk(in[0].get<std::string>(), out, seen);
      };
  for (const std::string& out : p.outputs) {
    std::set<std::string> seen;
    walk(out, out, seen);
  }
  if (val.errors.empty()) {
    v.ok = true;
    return v;
  }
  Json node_errors = Json::object();
  std::string details;
  for (auto& [id, errs] : val.errors) {
    Json deps = Json::array();
    for (const std::string& o : dependents[id]) deps.push_back(o);
    node_errors[id] = {{"errors", errs}, {"dependent_outputs", deps},
                       {"class_type", p.nodes.at(id).class_type}};
    for (const Json& e : errs) {
      if (!details.empty()) details += "\n";
      details += fmt::format("{}: {}: {}", e["type"].get<std::string>(),
                             e["message"].get<std::string>(), e["details"].get<std::string>());
    }
  }
  v.error = top_error("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                      details);
  v.error["node_errors"] = node_errors;
  return v;
}

}  // namespace hr
