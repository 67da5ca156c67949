// Unicode Normalization Form C (UAX #15), which the CLIP and Qwen tokenizers apply first.
#pragma once

#include <string>
#include <string_view>

namespace hr {

// The NFC form of `in`: full canonical decomposition, canonical ordering of combining marks,
// canonical composition (Unicode 14 data, unicode_nfc_table.inc).
std::u32string unicode_nfc(std::u32string_view in);

// The canonical combining class of `c` (0 for starters).
int unicode_combining_class(char32_t c);

}  // namespace hr
