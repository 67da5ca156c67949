// SentencePiece's precompiled charsmap and the T5 tokenizer's normalizer sequence.
#include "models/t5/t5_normalizer.h"

#include <cstring>

#include "models/t5/grapheme.h"
#include "models/utf8.h"

namespace hr {

// Note [T5 normalizer]
// tokenizer.json's normalizer is Sequence[Precompiled, Strip(right), Replace(' {2,}', U+2581)].
// `tokenizers` (with the spm_precompiled crate) runs Precompiled like this, and so do we:
//  - the text is cut into extended grapheme clusters (UAX #29);
//  - a cluster shorter than 6 UTF-8 bytes is looked up whole: the trie's common-prefix search
//    over its bytes, and the FIRST hit (the shortest key that is a prefix of the cluster)
//    replaces the whole cluster. So "e" + U+0301 becomes "é" (a two-code-point key), "\r\n"
//    becomes one space (the key "\r" matches first), and a fullwidth letter followed by a
//    combining mark loses the mark (the key of the letter matches first);
//  - otherwise (no hit, or 6 bytes or more) each code point is looked up alone and replaced
//    by its hit or kept.
// Then trailing Unicode whitespace is stripped (Rust char::is_whitespace) and each run of two
// or more ASCII spaces becomes one U+2581, which the Metaspace pre-tokenizer later treats as a
// word start (so "a  b" and "a b" give the same pieces).

namespace {

// darts-clone unit fields.
bool unit_has_leaf(uint32_t u) { return ((u >> 8) & 1) != 0; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

// Rust's char::is_whitespace (the White_Space property).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Precompiled: the charsmap per grapheme cluster.
std::string charsmap_apply(const PrecompiledCharsmap& charsmap, std::string_view text) {
  std::u32string cps = utf8_decode(text);
  std::vector<size_t> starts = grapheme_starts(cps);
  std::string out;
  out.reserve(text.size());
  std::string cluster, one;
  for (size_t g = 0; g < starts.size(); ++g) {
    size_t end = g + 1 < starts.size() ? starts[g + 1] : cps.size();
    cluster.clear();
    for (size_t i = starts[g]; i < end; ++i) utf8_append(cps[i], cluster);
    if (cluster.size() < 6) {
      if (auto norm = charsmap.transform(cluster)) {
        out.append(*norm);
        continue;
      }
    }
    for (size_t i = starts[g]; i < end; ++i) {
      one.clear();
      utf8_append(cps[i], one);
      auto norm = charsmap.transform(one);
      out.append(norm ? *norm : std::string_view(one));
    }
  }
  return out;
}

std::string strip_right(std::string_view text) {
  std::u32string cps = utf8_decode(text);
  while (!cps.empty() && is_white_space(cps.back())) cps.pop_back();
  return utf8_encode(cps);
}

// Replace(Regex ' {2,}', U+2581).
std::string collapse_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    while (j < text.size() && text[j] == ' ') ++j;
    if (j - i >= 2) {
      out.append("\u2581");
      i = j;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

}  // namespace

Result<PrecompiledCharsmap> PrecompiledCharsmap::parse(std::string_view blob,
                                                       const std::string& name) {
  if (blob.size() < 4)
    return make_error(ErrorCode::CORRUPT, "'{}': precompiled charsmap of {} bytes", name,
                      blob.size());
  uint32_t trie_bytes = uint32_t(uint8_t(blob[0])) | uint32_t(uint8_t(blob[1])) << 8 |
                        uint32_t(uint8_t(blob[2])) << 16 | uint32_t(uint8_t(blob[3])) << 24;
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return make_error(ErrorCode::CORRUPT, "'{}': charsmap trie of {} bytes in a {}-byte blob", name,
                      trie_bytes, blob.size());
  PrecompiledCharsmap m;
  m.units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < m.units_.size(); ++i) {
    const char* p = blob.data() + 4 + 4 * i;
    m.units_[i] = uint32_t(uint8_t(p[0])) | uint32_t(uint8_t(p[1])) << 8 |
                  uint32_t(uint8_t(p[2])) << 16 | uint32_t(uint8_t(p[3])) << 24;
  }
  m.normalized_ = std::string(blob.substr(4 + trie_bytes));
  return m;
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  size_t pos = unit_offset(units_[0]);
  for (char ch : chunk) {
    auto c = uint8_t(ch);
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;
    uint32_t unit = units_[pos];
    if (unit_label(unit) != c) return std::nullopt;
    pos ^= unit_offset(unit);
    if (pos >= units_.size()) return std::nullopt;
    if (unit_has_leaf(unit)) {  // the first hit is the one used (Note [T5 normalizer])
      size_t begin = unit_value(units_[pos]);
      if (begin > normalized_.size()) return std::nullopt;
      size_t end = normalized_.find('\0', begin);
      if (end == std::string::npos) end = normalized_.size();
      return std::string_view(normalized_).substr(begin, end - begin);
    }
  }
  return std::nullopt;
}

std::string t5_normalize(const PrecompiledCharsmap& charsmap, std::string_view text) {
  return collapse_spaces(strip_right(charsmap_apply(charsmap, text)));
}

}  // namespace hr
