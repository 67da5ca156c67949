// A small well-formedness check of the SVG the diagnosis commands write: every tag closes in
// order, attribute values are quoted, text holds no raw '<' or '&' outside entities, and the root
// is <svg>. Returns the element names in document order, or an error message.
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace hr::test {

struct SvgCheck {
  bool ok = false;
  std::string error;
  std::vector<std::string> elements;
  size_t count(const std::string& name) const {
    size_t n = 0;
    for (const std::string& e : elements) n += e == name;
    return n;
  }
};

inline bool svg_entity_ok(const std::string& s, size_t i) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
    if (s.compare(i, std::string(e).size(), e) == 0) return true;
  return false;
}

// Attributes of one tag body (after the name): name="value" pairs.
inline bool svg_attributes_ok(const std::string& body, std::string& error) {
  size_t i = 0;
  while (i < body.size()) {
    while (i < body.size() && std::isspace(static_cast<unsigned char>(body[i]))) ++i;
    if (i >= body.size() || body[i] == '/') return true;
    size_t eq = body.find('=', i);
    if (eq == std::string::npos || eq + 1 >= body.size() || body[eq + 1] != '"') {
      error = "unquoted attribute in <" + body + ">";
      return false;
    }
    size_t close = body.find('"', eq + 2);
    if (close == std::string::npos) {
      error = "unterminated attribute in <" + body + ">";
      return false;
    }
    for (size_t k = eq + 2; k < close; ++k)
      if (body[k] == '<' || (body[k] == '&' && !svg_entity_ok(body, k))) {
        error = "raw < or & in an attribute";
        return false;
      }
    i = close + 1;
  }
  return true;
}

inline SvgCheck svg_check(const std::string& s) {
  SvgCheck c;
  std::vector<std::string> open;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] != '<') {
      if (s[i] == '&' && !svg_entity_ok(s, i)) return c.error = "raw & in text", c;
      ++i;
      continue;
    }
    size_t end = s.find('>', i);
    if (end == std::string::npos) return c.error = "unterminated tag", c;
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return c.error = "mismatched </" + tag.substr(1) + ">", c;
      open.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    size_t name_end = 0;
    while (name_end < tag.size() &&
           (std::isalnum(static_cast<unsigned char>(tag[name_end])) || tag[name_end] == '-'))
      ++name_end;
    std::string name = tag.substr(0, name_end);
    if (name.empty()) return c.error = "empty tag name", c;
    if (open.empty() && !c.elements.empty()) return c.error = "content after the root", c;
    if (!svg_attributes_ok(tag.substr(name_end), c.error)) return c;
    c.elements.push_back(name);
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return c.error = "unclosed <" + open.back() + ">", c;
  if (c.elements.empty() || c.elements[0] != "svg") return c.error = "root is not <svg>", c;
  c.ok = true;
  return c;
}

}  // namespace hr::test
