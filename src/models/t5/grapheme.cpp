// Extended grapheme cluster boundaries (UAX #29) from a generated class table.
#include "models/t5/grapheme.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace hr {
namespace {

using G = GraphemeClass;

struct GraphemeRange {
  char32_t first, last;
  GraphemeClass cls;
};

constexpr GraphemeRange kRanges[] = {
#include "models/t5/grapheme_table.inc"
};

bool is_control(G c) { return c == G::CR || c == G::LF || c == G::CONTROL; }

// Whether there is no boundary between `prev` and `next`; `emoji_zwj` is true when the text
// before `next` ends with ExtPict Extend* ZWJ, `ri_odd` when it ends with an odd run of RIs.
bool grapheme_joins(G prev, G next, bool emoji_zwj, bool ri_odd) {
  if (prev == G::CR && next == G::LF) return true;         // GB3
  if (is_control(prev) || is_control(next)) return false;  // GB4, GB5
  if (prev == G::L && (next == G::L || next == G::V || next == G::LV || next == G::LVT))
    return true;                                                                       // GB6
  if ((prev == G::LV || prev == G::V) && (next == G::V || next == G::T)) return true;  // GB7
  if ((prev == G::LVT || prev == G::T) && next == G::T) return true;                   // GB8
  if (next == G::EXTEND || next == G::ZWJ) return true;                                // GB9
  if (next == G::SPACING_MARK) return true;                                            // GB9a
  if (prev == G::PREPEND) return true;                                                 // GB9b
  if (emoji_zwj && next == G::EXTENDED_PICTOGRAPHIC) return true;                      // GB11
  if (prev == G::REGIONAL_INDICATOR && next == G::REGIONAL_INDICATOR) return ri_odd;   // GB12/13
  return false;                                                                        // GB999
}

}  // namespace

GraphemeClass grapheme_class(char32_t c) {
  auto it = std::upper_bound(std::begin(kRanges), std::end(kRanges), c,
                             [](char32_t v, const GraphemeRange& r) { return v < r.first; });
  if (it == std::begin(kRanges)) return G::OTHER;
  --it;
  return c <= it->last ? it->cls : G::OTHER;
}

// GB9c would join Indic consonant + virama (+ ZWJ) + consonant sequences into one cluster.
// Every such code point is three UTF-8 bytes, so the joined cluster and each of the clusters
// GB9c would merge that have two or more code points are at least six bytes long, and the
// normalizer looks those up code point by code point either way: leaving GB9c out changes no
// result of the normalizer.
std::vector<size_t> grapheme_starts(std::u32string_view text) {
  std::vector<size_t> starts;
  G prev = G::OTHER;
  bool in_emoji = false;   // inside ExtPict Extend*
  bool emoji_zwj = false;  // ExtPict Extend* ZWJ just seen
  int ri_run = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    G cls = grapheme_class(text[i]);
    if (i == 0 || !grapheme_joins(prev, cls, emoji_zwj, ri_run % 2 == 1)) starts.push_back(i);
    emoji_zwj = in_emoji && cls == G::ZWJ;
    in_emoji = cls == G::EXTENDED_PICTOGRAPHIC || (in_emoji && cls == G::EXTEND);
    ri_run = cls == G::REGIONAL_INDICATOR ? ri_run + 1 : 0;
    prev = cls;
  }
  return starts;
}

}  // namespace hr
