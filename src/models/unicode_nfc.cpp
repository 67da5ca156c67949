// Unicode NFC: decomposition, canonical ordering and composition over the tables that
// make_nfc_table.py writes from Python's unicodedata.
#include "models/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

namespace hr {

namespace {

struct CombiningClassRange {
  char32_t lo, hi;
  int ccc;
};
struct Decomposition {
  char32_t cp;
  char32_t parts[4];  // the full canonical decomposition, 0-terminated when shorter
};
struct Composition {
  char32_t first, second, composed;
};

#include "models/unicode_nfc_table.inc"

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = 588, kSCount = 11172;

void append_decomposition(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  std::span<const Decomposition> t = kDecompositions;
  auto it = std::lower_bound(t.begin(), t.end(), c,
                             [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it == t.end() || it->cp != c) {
    out.push_back(c);
    return;
  }
  for (char32_t p : it->parts)
    if (p) out.push_back(p);
}

// The primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  std::span<const Composition> t = kCompositions;
  auto it = std::lower_bound(t.begin(), t.end(), std::pair{a, b},
                             [](const Composition& x, const std::pair<char32_t, char32_t>& k) {
                               return x.first != k.first ? x.first < k.first : x.second < k.second;
                             });
  if (it != t.end() && it->first == a && it->second == b) return it->composed;
  return 0;
}

// Stable sort of every run of non-starters by combining class.
void canonical_order(std::u32string& s) {
  for (size_t i = 1; i < s.size(); ++i) {
    int ci = unicode_combining_class(s[i]);
    if (ci == 0) continue;
    size_t j = i;
    while (j > 0 && unicode_combining_class(s[j - 1]) > ci) {
      std::swap(s[j - 1], s[j]);
      --j;
    }
  }
}

}  // namespace

int unicode_combining_class(char32_t c) {
  if (c < 0x300) return 0;
  std::span<const CombiningClassRange> t = kCombiningClasses;
  auto it = std::upper_bound(t.begin(), t.end(), c,
                             [](char32_t v, const CombiningClassRange& r) { return v < r.lo; });
  if (it == t.begin()) return 0;
  --it;
  return c <= it->hi ? it->ccc : 0;
}

std::u32string unicode_nfc(std::u32string_view in) {
  std::u32string d;
  d.reserve(in.size());
  for (char32_t c : in) append_decomposition(c, d);
  canonical_order(d);
  // Compose each character with the last starter unless a character between them blocks it
  // (has class 0 or a class >= its own); with canonical order the last one between is the
  // largest.
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;
  int last_ccc = 0;
  for (char32_t c : d) {
    int ccc = unicode_combining_class(c);
    if (starter != std::u32string::npos) {
      bool adjacent = starter + 1 == out.size();
      if (adjacent || (last_ccc != 0 && last_ccc < ccc)) {
        if (char32_t comp = compose_pair(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(c);
  }
  return out;
}

}  // namespace hr
