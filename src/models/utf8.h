// UTF-8 decoding and encoding shared by the tokenizers (CLIP BPE, T5 Unigram).
#pragma once

#include <string>
#include <string_view>

namespace hr {

// Code points of `s`; every byte that does not start a complete, well-formed sequence becomes
// one U+FFFD (Python's errors="replace" gives one per maximal bad subpart, which valid prompt
// text from JSON never has).
std::u32string utf8_decode(std::string_view s);

// Appends `c` encoded as UTF-8.
void utf8_append(char32_t c, std::string& out);

// `s` encoded as UTF-8.
std::string utf8_encode(std::u32string_view s);

}  // namespace hr
