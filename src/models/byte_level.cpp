// The GPT-2 byte-to-unicode table (models/byte_level.h).
#include "models/byte_level.h"

#include "models/utf8.h"

namespace hr {

namespace {

bool byte_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

// The code point each byte maps to.
const std::array<char32_t, 256>& byte_code_points() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[size_t(b)] = byte_printable(b) ? char32_t(b) : next++;
    return t;
  }();
  return table;
}

}  // namespace

const std::array<std::string, 256>& byte_level_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (size_t b = 0; b < 256; ++b) utf8_append(byte_code_points()[b], t[b]);
    return t;
  }();
  return table;
}

int byte_level_byte(char32_t symbol) {
  if (symbol < 256) return byte_printable(int(symbol)) ? int(symbol) : -1;
  // The non-printable bytes, in order, are U+0100..U+0143.
  static const std::array<int, 68> unprintable = [] {
    std::array<int, 68> t{};
    size_t k = 0;
    for (int b = 0; b < 256; ++b)
      if (!byte_printable(b)) t[k++] = b;
    return t;
  }();
  if (symbol - 256 < unprintable.size()) return unprintable[symbol - 256];
  return -1;
}

}  // namespace hr
