// The T5 tokenizer's normalizer: SentencePiece's precompiled character map (a double-array trie
// of rewrite rules) applied per grapheme cluster as Hugging Face `tokenizers` does, then the
// right strip and the ' {2,}' -> U+2581 replacement of tokenizer.json's normalizer sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hr {

// A SentencePiece precompiled_charsmap: [u32 LE trie size in bytes][darts-clone double array of
// u32 units][NUL-terminated replacement strings]. The trie maps UTF-8 byte strings to offsets of
// replacements.
class PrecompiledCharsmap {
 public:
  // `name` appears in error messages.
  static Result<PrecompiledCharsmap> parse(std::string_view blob, const std::string& name);

  // The replacement of the shortest key that is a prefix of `chunk` (search stops at a NUL
  // byte), or nullopt when no key is. Note [T5 normalizer].
  std::optional<std::string_view> transform(std::string_view chunk) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
};

// The normalizer sequence of the T5 v1.1 tokenizer.json (Note [T5 normalizer]): the charsmap
// per grapheme cluster, strip trailing whitespace, every run of two or more spaces -> U+2581.
std::string t5_normalize(const PrecompiledCharsmap& charsmap, std::string_view text);

}  // namespace hr
