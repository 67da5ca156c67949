// json_parse: a byte scan for the nesting depth, then nlohmann's (iterative) parser.
#include "core/json_parse.h"

#include <algorithm>

namespace hr {

// Note [json depth limit]: nlohmann's parser and destructor are loops, but dump(), copies and
// comparisons recurse once per level, on whatever thread touches the value. A request 200 KB
// long can nest 100,000 levels, enough to overflow an 8 MiB stack (issue 35: the SQLite store
// dumped such a prompt on an HTTP thread). Every JSON document that comes from outside goes
// through json_parse, which refuses anything deeper than kJsonMaxDepth before a value exists;
// so every value the server holds, stores, sends over WebSocket or serializes again (history,
// SQLite, Redis) is at most kJsonMaxDepth deep plus the few levels of the envelope built around
// it, and dump()'s recursion stays a few hundred frames deep.
int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
  return deepest;
}

Result<nlohmann::json> json_parse(std::string_view text, int max_depth) {
  if (json_depth(text, max_depth) > max_depth)
    return make_error(ErrorCode::INVALID_ARGUMENT, "JSON nested deeper than {} levels", max_depth);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "not valid JSON: {}", e.what());
  }
}

}  // namespace hr
