// Byte formatting and parsing.
#include "core/bytes.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace hr {

std::string bytes_format(uint64_t b) {
  if (b == UINT64_MAX) return "unlimited";
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1ull << 10));
  return fmt::format("{} B", b);
}

Result<uint64_t> bytes_parse(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  size_t n = 0;
  while (n < t.size() && (std::isdigit(static_cast<unsigned char>(t[n])) || t[n] == '.')) ++n;
  double value = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + n, value);
  std::string unit;
  for (char c : t.substr(n))
    if (!std::isspace(static_cast<unsigned char>(c))) unit.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
  if (n == 0 || ec != std::errc() || p != t.data() + n || shift < 0 || !std::isfinite(value))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "'{}' is not a size (a number with an optional unit: 6GiB, 6144MiB, 512M)",
                      text);
  double bytes = std::ldexp(value, shift);
  if (bytes >= 18446744073709549568.0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "size '{}' is too large", text);
  return uint64_t(std::llround(bytes));
}

}  // namespace hr
