// Unicode character facts the tokenizers share (CLIP BPE, Qwen BPE): letter (\p{L}) and number
// (\p{N}) classes, White_Space (\s), simple lower-case and canonical composition (Unicode 14).
#pragma once

#include <string>
#include <string_view>

namespace hr {

bool unicode_is_letter(char32_t c);  // general category L*
bool unicode_is_number(char32_t c);  // general category N* (Nd, Nl, No)
bool unicode_is_space(char32_t c);   // the White_Space property: what \s matches in the regexes

// Appends the simple lower-case mapping of `c` (U+0130 gives two code points, as Python's).
void unicode_append_lower(char32_t c, std::u32string& out);

// NFC by composing adjacent pairs (base + mark, Hangul syllables) left to right: the NFC form of
// any precomposed or fully decomposed text. Not done: singleton decompositions (U+212B ANGSTROM
// SIGN stays), reordering of several combining marks, composition across a blocking mark.
std::u32string unicode_nfc_pairs(std::u32string_view in);

}  // namespace hr
