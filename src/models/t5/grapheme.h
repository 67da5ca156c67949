// Extended grapheme clusters (Unicode UAX #29), which the T5 normalizer looks up as a whole
// (Note [T5 normalizer] in t5_normalizer.cpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace hr {

// The Grapheme_Cluster_Break class of a code point, with Extended_Pictographic as a class of
// its own (no code point is both that and a GCB class other than Other).
enum class GraphemeClass : unsigned char {
  OTHER,
  CR,
  LF,
  CONTROL,
  EXTEND,
  ZWJ,
  REGIONAL_INDICATOR,
  PREPEND,
  SPACING_MARK,
  L,
  V,
  T,
  LV,
  LVT,
  EXTENDED_PICTOGRAPHIC,
};

GraphemeClass grapheme_class(char32_t c);

// The start index of every cluster of `text` (code points), in order; empty for empty text.
// Rules GB3-GB13 of UAX #29 except GB9c (Indic conjuncts; see the .cpp for why it does not
// change what the T5 normalizer produces).
std::vector<size_t> grapheme_starts(std::u32string_view text);

}  // namespace hr
