// API-format workflows written in tests: a link [id, slot] and a node {class_type, inputs}.
#pragma once

#include <utility>

#include <nlohmann/json.hpp>

namespace hr::test {

inline nlohmann::json link(const char* id, int slot = 0) { return nlohmann::json::array({id, slot}); }

inline nlohmann::json node(const char* class_type, nlohmann::json inputs) {
  return nlohmann::json{{"class_type", class_type}, {"inputs", std::move(inputs)}};
}

}  // namespace hr::test
