// The one way JSON from outside the process is parsed (request bodies, workflow files, values
// stored in SQLite and Redis): with a nesting limit, so that nothing deeper ever exists.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"

namespace hr {

// ComfyUI's prompts nest a few levels (prompt -> node -> inputs -> link); extra_data and
// history entries a few more. Note [json depth limit].
inline constexpr int kJsonMaxDepth = 256;
// Values headroom stored itself wrap a client's document in a few levels of their own (a history
// entry holds extra_data two levels down, a Redis running record holds the job one level down),
// so they are read back with this much more room; they were refused when they came in otherwise.
inline constexpr int kJsonStoredMaxDepth = kJsonMaxDepth + 16;

// The document in `text`, or INVALID_ARGUMENT saying why not: "JSON nested deeper than 256
// levels" (`max_depth`), or "not valid JSON: <the parser's message>" (syntax, invalid UTF-8, a
// number out of double's range). Duplicate keys keep the last value, as Python's json does.
Result<nlohmann::json> json_parse(std::string_view text, int max_depth = kJsonMaxDepth);

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted),
// stopping at the first level past `limit`; the scan is a loop, never recursion.
int json_depth(std::string_view text, int limit);

}  // namespace hr
