// An API-format prompt ({id: {class_type, inputs}}) and its validation with ComfyUI's error
// structure: error.{type, message, details, extra_info} and node_errors[id].errors[].
#pragma once

#include <map>
#include <string>
#include <vector>

#include "workflow/node_def.h"

namespace hr {

struct PromptNode {
  std::string id;
  std::string class_type;
  const NodeDef* def = nullptr;
  // Literal inputs converted to their declared types; links as [id, slot] arrays.
  Json inputs = Json::object();
};

struct Prompt {
  std::map<std::string, PromptNode> nodes;
  std::vector<std::string> outputs;  // output nodes to execute, sorted by id
  Json source;                       // the prompt as received (for PNG metadata)
};

struct PromptValidation {
  bool ok = false;
  Prompt prompt;
  // On failure: {"error": {...}, "node_errors": {...}} exactly as ComfyUI's POST /prompt 400.
  Json error = Json::object();
  // One line per problem, for the command line.
  std::string summary() const;
};

// Parses text as JSON and validates it; malformed JSON is an invalid_prompt error.
PromptValidation prompt_validate_text(const std::string& text, const NodeRegistry& registry);
PromptValidation prompt_validate(const Json& prompt, const NodeRegistry& registry);

// True when a link value has the shape [node_id, output_index].
bool json_is_link(const Json& v);

}  // namespace hr
