// Byte-level BPE: vocab.json and merges.txt read into tables, and the merge loop.
#include "models/bpe.h"

#include <climits>
#include <sstream>

#include "core/json_parse.h"

namespace hr {

Result<BpeTable> bpe_read_vocab(std::string_view json_text, const std::string& name) {
  Result<nlohmann::json> parsed = json_parse(json_text);
  const nlohmann::json vocab = parsed.ok() ? std::move(parsed).value() : nlohmann::json();
  if (!vocab.is_object())
    return make_error(ErrorCode::CORRUPT, "'{}' is not a JSON object of token ids", name);
  BpeTable out;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX / 2)
      return make_error(ErrorCode::CORRUPT, "'{}': id of '{}' is not a valid id", name, it.key());
    out[it.key()] = it.value().get<int32_t>();
  }
  return out;
}

Result<BpeTable> bpe_read_merges(std::string_view text, const std::string& name) {
  std::istringstream lines{std::string(text)};
  std::string line;
  BpeTable ranks;
  int32_t rank = 0;
  bool first = true;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      return make_error(ErrorCode::CORRUPT, "'{}': merge line {} is not two symbols: '{}'", name,
                        rank + 1, line);
    ranks.emplace(line, rank++);
  }
  if (rank == 0) return make_error(ErrorCode::CORRUPT, "'{}' has no merges", name);
  return ranks;
}

std::vector<std::string> bpe_merge(std::vector<std::string> parts, const BpeTable& ranks) {
  std::string key;
  while (parts.size() > 1) {
    int32_t best = INT32_MAX;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      key.assign(parts[i]).append(" ").append(parts[i + 1]);
      auto r = ranks.find(key);
      if (r != ranks.end() && r->second < best) {
        best = r->second;
        best_i = i;
      }
    }
    if (best == INT32_MAX) break;
    const std::string a = parts[best_i], b = parts[best_i + 1];
    std::vector<std::string> merged;
    merged.reserve(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
        merged.push_back(a + b);
        ++i;
      } else {
        merged.push_back(std::move(parts[i]));
      }
    }
    parts = std::move(merged);
  }
  return parts;
}

}  // namespace hr
