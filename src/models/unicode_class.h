// Unicode character facts the tokenizers share (CLIP BPE, Qwen BPE): letter (\p{L}) and number
// (\p{N}) classes, White_Space (\s) and simple lower-case (Unicode 14). NFC: models/unicode_nfc.h.
#pragma once

#include <string>
#include <string_view>

namespace hr {

bool unicode_is_letter(char32_t c);  // general category L*
bool unicode_is_number(char32_t c);  // general category N* (Nd, Nl, No)
bool unicode_is_space(char32_t c);   // the White_Space property: what \s matches in the regexes

// Appends the simple lower-case mapping of `c` (U+0130 gives two code points, as Python's).
void unicode_append_lower(char32_t c, std::u32string& out);

}  // namespace hr
