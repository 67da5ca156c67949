// Model files whose every weight is an integer rule of its key (Note [reproducible tiny weights]
// in tests/data/flux/e2e/make_flux_e2e_golden.py): written again from a safetensors header text
// alone, byte for byte as the golden generators wrote them, so a golden can stand in for files
// too large to keep in the repository (tests/data/zimage/e2e: 19 MB of tiny Z-Image models).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hr::test {

// The generators' weight seed (WEIGHT_SEED in make_flux_e2e_golden.py).
inline constexpr uint64_t kRuleWeightSeed = 3939;

inline uint64_t rule_fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// m in [-1024, 1023] for element i (row-major) of the tensor named `key`: splitmix64 from
// fnv1a64(key) ^ seed, advanced i + 1 times.
inline int64_t rule_int(uint64_t key_state, int64_t i) {
  uint64_t z = key_state + uint64_t(i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return int64_t(z >> 53) - 1024;
}

// The value kind of a tensor (weight_rule in the generator): norm scales 1 + (m >> 3) 2^-10,
// biases m 2^-15, embeddings m 2^-9, other matrices m 2^-(10 + k) with 3 4^k <= fan_in.
struct RuleScale {
  bool norm_scale = false;
  double step = 0;  // 2^exponent
};

inline RuleScale rule_scale(const std::string& key, const std::vector<int64_t>& shape) {
  auto ends_with = [&](std::string_view s) {
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  if (shape.size() == 1)
    return ends_with("bias") ? RuleScale{false, 0x1p-15} : RuleScale{true, 0x1p-10};
  if (key.find("embedding") != std::string::npos || ends_with("shared.weight") ||
      key.find("relative_attention_bias") != std::string::npos)
    return {false, 0x1p-9};
  int64_t fan_in = 1;
  for (size_t d = 1; d < shape.size(); ++d) fan_in *= shape[d];
  int k = 0;
  while (3 * (int64_t(1) << (2 * (k + 1))) <= fan_in) ++k;
  return {false, 1.0 / double(int64_t(1) << (10 + k))};
}

// sum_j w_j (2 j + 1) mod 2^64 over the bytes' little-endian 64-bit words, the last one
// zero-padded (checksum64 in make_zimage_e2e_golden.py).
inline uint64_t rule_checksum64(const std::string& bytes) {
  uint64_t sum = 0;
  for (size_t j = 0; j * 8 < bytes.size(); ++j) {
    uint64_t w = 0;
    for (size_t b = 0; b < 8 && j * 8 + b < bytes.size(); ++b)
      w |= uint64_t(static_cast<unsigned char>(bytes[j * 8 + b])) << (8 * b);
    sum += w * (2 * uint64_t(j) + 1);
  }
  return sum;
}

// The file with header `header_text` (the JSON between the 8-byte length and the data, padding
// included; every tensor F16) and rule values, as bytes. INVALID_ARGUMENT for a header it cannot
// fill (another dtype, offsets that leave gaps).
inline Result<std::string> rule_file_bytes(const std::string& header_text) {
  const nlohmann::json h = nlohmann::json::parse(header_text, nullptr, false);
  if (h.is_discarded() || !h.is_object())
    return make_error(ErrorCode::INVALID_ARGUMENT, "rule weights: the header is not a JSON object");
  std::map<int64_t, std::pair<std::string, std::vector<int64_t>>> by_offset;
  for (const auto& [key, e] : h.items()) {
    if (key == "__metadata__") continue;
    if (e.value("dtype", "") != "F16")
      return make_error(ErrorCode::INVALID_ARGUMENT, "rule weights: {} is not F16", key);
    by_offset[e["data_offsets"][0].get<int64_t>()] = {key, e["shape"].get<std::vector<int64_t>>()};
  }
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b)
    out[size_t(b)] = char((uint64_t(header_text.size()) >> (8 * b)) & 0xFF);
  out += header_text;
  const size_t data_start = out.size();
  for (const auto& [offset, entry] : by_offset) {
    const auto& [key, shape] = entry;
    if (int64_t(out.size() - data_start) != offset)
      return make_error(ErrorCode::INVALID_ARGUMENT, "rule weights: a gap before {}", key);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const RuleScale s = rule_scale(key, shape);
    const uint64_t state = rule_fnv1a64(key) ^ kRuleWeightSeed;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t m = rule_int(state, i);
      const double v = s.norm_scale ? 1.0 + double(m >> 3) * s.step : double(m) * s.step;
      const uint16_t bits = f32_to_f16(float(v));  // exact: every value fits f16
      out.push_back(char(bits & 0xFF));
      out.push_back(char(bits >> 8));
    }
  }
  return out;
}

// Writes the file of `header_text` to `path` and checks it against the generator's checksum
// (hex, as the golden's metadata holds it). CORRUPT names the file when they differ.
inline Status rule_file_write(const std::string& header_text, const std::string& checksum_hex,
                              const std::string& path) {
  HR_ASSIGN_OR_RETURN(std::string bytes, rule_file_bytes(header_text));
  const std::string got = fmt::format("{:016x}", rule_checksum64(bytes));
  if (got != checksum_hex)
    return make_error(ErrorCode::CORRUPT,
                      "rule weights: {} written from the golden's header has checksum {}, the "
                      "generator's file {}",
                      path, got, checksum_hex);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) return make_error(ErrorCode::IO, "rule weights: cannot write {}", path);
  return Status();
}

}  // namespace hr::test
