// ComfyUI prompt weighting and 77-token chunking (comfy/sd1_clip.py semantics).
#include "models/prompt_weights.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace hr {
namespace {

// escape_important: "\)" and "\(" become two-byte markers no parser step looks at.
constexpr std::string_view kEscClose = std::string_view("\0\1", 2);
constexpr std::string_view kEscOpen = std::string_view("\0\2", 2);

// Built by appending: GCC 12 reports a false -Wrestrict for std::string::replace here.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    size_t f = s.find(from, pos);
    out.append(s.substr(pos, f == std::string_view::npos ? s.npos : f - pos));
    if (f == std::string_view::npos) break;
    out.append(to);
    pos = f + from.size();
  }
  return out;
}

// Python's float(): surrounding whitespace, sign, '_' between digits, decimal or exponent
// notation, inf / infinity / nan in any case. No hex.
std::optional<double> parse_python_float(std::string_view s) {
  while (!s.empty() && std::isspace(uint8_t(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(uint8_t(s.back()))) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      bool between = i > 0 && i + 1 < s.size() && std::isdigit(uint8_t(s[i - 1])) &&
                     std::isdigit(uint8_t(s[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    clean.push_back(s[i]);
  }
  const char* b = clean.data();
  const char* e = b + clean.size();
  bool negative = false;
  if (*b == '+' || *b == '-') {
    negative = *b == '-';
    ++b;
  }
  if (b == e || *b == '+' || *b == '-') return std::nullopt;
  std::string_view body(b, size_t(e - b));
  if (body.find('(') != std::string_view::npos) return std::nullopt;  // "nan(...)"
  double v = 0;
  auto [ptr, ec] = std::from_chars(b, e, v, std::chars_format::general);
  if (ec != std::errc() || ptr != e) return std::nullopt;
  return negative ? -v : v;
}

// parse_parentheses: splits into top-level "( ... )" groups and the text between them.
std::vector<std::string> parse_parentheses(const std::string& s) {
  std::vector<std::string> result;
  std::string current;
  int nesting = 0;
  for (char c : s) {
    if (c == '(') {
      if (nesting == 0) {
        if (!current.empty()) result.push_back(std::move(current));
        current.clear();
        current.push_back('(');
      } else {
        current += c;
      }
      ++nesting;
    } else if (c == ')') {
      --nesting;
      if (nesting == 0) {
        current.push_back(')');
        result.push_back(std::move(current));
        current.clear();
      } else {
        current += c;
      }
    } else {
      current += c;
    }
  }
  if (!current.empty()) result.push_back(current);
  return result;
}

void token_weights(const std::string& s, double current, std::vector<WeightedSegment>& out) {
  for (std::string& x : parse_parentheses(s)) {
    if (x.size() >= 2 && x.front() == '(' && x.back() == ')') {
      std::string inner = x.substr(1, x.size() - 2);
      double weight = current * 1.1;
      size_t colon = inner.rfind(':');
      if (colon != std::string::npos && colon > 0) {
        if (auto w = parse_python_float(std::string_view(inner).substr(colon + 1))) {
          weight = *w;
          inner.resize(colon);
        }
      }
      token_weights(inner, weight, out);
    } else {
      out.push_back({std::move(x), current});
    }
  }
}

}  // namespace

std::vector<WeightedSegment> prompt_parse_weights(std::string_view text) {
  std::string escaped = replace_all(replace_all(text, "\\)", kEscClose), "\\(", kEscOpen);
  std::vector<WeightedSegment> out;
  token_weights(escaped, 1.0, out);
  for (WeightedSegment& s : out) {
    s.text = replace_all(replace_all(s.text, kEscClose, ")"), kEscOpen, "(");
  }
  return out;
}

std::vector<std::string> prompt_split_words(const std::string& text) {
  static constexpr std::string_view kIdent = "embedding:";
  std::vector<std::string> words;
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    if ((text[pos] == ' ' || text[pos] == '\n') &&
        std::string_view(text).substr(pos + 1, kIdent.size()) == kIdent) {
      words.push_back(text.substr(start, pos - start));
      start = pos + 1;
      pos = start + kIdent.size();
      continue;
    }
    ++pos;
  }
  words.push_back(text.substr(start));
  std::erase_if(words, [](const std::string& w) { return w.empty(); });
  return words;
}

std::string prompt_unescape_parens(std::string_view text) {
  // escape_important then unescape_important, with nothing parsed in between.
  return replace_all(replace_all(replace_all(replace_all(text, "\\)", kEscClose), "\\(", kEscOpen),
                                 kEscClose, ")"),
                     kEscOpen, "(");
}

bool TokenChunks::unweighted() const {
  for (const auto& row : weights)
    for (double w : row)
      if (w != 1.0) return false;
  return true;
}

TokenChunks prompt_tokenize(const Tokenizer& tokenizer, std::string_view text,
                            const ChunkOptions& options) {
  struct Group {
    std::vector<int32_t> ids;
    double weight;
  };
  std::vector<Group> groups;
  for (const WeightedSegment& seg : prompt_parse_weights(text))
    for (const std::string& word : prompt_split_words(seg.text))
      groups.push_back({tokenizer.encode(word), seg.weight});

  const size_t max_len = size_t(options.max_length);
  const size_t limit = max_len - 1;  // room left for EOS
  TokenChunks out;
  std::vector<int32_t> ids;
  std::vector<double> weights;
  auto open_chunk = [&] {
    ids.clear();
    weights.clear();
    if (options.start_token) {
      ids.push_back(tokenizer.bos());
      weights.push_back(1.0);
    }
  };
  auto pad_to = [&](size_t length) {
    if (ids.size() >= length) return;
    weights.resize(length, 1.0);
    ids.resize(length, options.pad);
  };
  auto close_chunk = [&](bool last) {
    ids.push_back(tokenizer.eos());
    weights.push_back(1.0);
    if (last) pad_to(ids.size() + size_t(std::max(options.min_padding, 0)));
    if (options.pad_to_max_length) pad_to(max_len);
    if (last) pad_to(size_t(std::max(options.min_length, 0)));
    out.ids.push_back(std::move(ids));
    out.weights.push_back(std::move(weights));
    open_chunk();
  };
  open_chunk();
  for (const Group& g : groups) {
    const bool large = g.ids.size() >= size_t(options.max_word_length);
    size_t next = 0;
    while (next < g.ids.size()) {
      size_t remaining = g.ids.size() - next;
      if (ids.size() + remaining > limit) {
        if (large) {
          size_t take = limit - ids.size();
          ids.insert(ids.end(), g.ids.begin() + long(next), g.ids.begin() + long(next + take));
          weights.insert(weights.end(), take, g.weight);
          next += take;
        }
        close_chunk(/*last=*/false);
      } else {
        ids.insert(ids.end(), g.ids.begin() + long(next), g.ids.end());
        weights.insert(weights.end(), remaining, g.weight);
        next = g.ids.size();
      }
    }
  }
  close_chunk(/*last=*/true);
  return out;
}

std::vector<int32_t> prompt_empty_row(const Tokenizer& tokenizer, const ChunkOptions& options) {
  std::vector<int32_t> row(size_t(options.max_length), options.pad);
  size_t next = 0;
  if (options.start_token && next < row.size()) row[next++] = tokenizer.bos();
  if (next < row.size()) row[next] = tokenizer.eos();
  return row;
}

}  // namespace hr
