// Tests for fp8 rounding (core/fp8_round.h) against ComfyUI's own stochastic_rounding and
// string_to_seed and against round-to-nearest-even expectations (tests/data/fp8/README.md).
#include "core/fp8_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "test_paths.h"

namespace hr {
namespace {

// Sequential little-endian reader over the golden file.
struct GoldenReader {
  std::vector<char> bytes;
  size_t pos = 0;
  template <typename T>
  T get() {
    T v{};
    if (pos + sizeof(T) > bytes.size()) throw std::runtime_error("fp8 golden: truncated");
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_n(size_t n) {
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }
};

GoldenReader open_golden() {
  std::ifstream f(test::data_path("fp8/fp8_round_golden.bin"), std::ios::binary);
  GoldenReader r;
  r.bytes.assign(std::istreambuf_iterator<char>(f), {});
  if (r.bytes.size() < 8 || std::string(r.bytes.data(), 8) != "HRF8GLD1") {
    throw std::runtime_error("fp8 golden: missing or not HRF8GLD1");
  }
  r.pos = 8;
  return r;
}

struct KeySeed {
  std::string key;
  uint32_t seed;
};

enum class CaseKind : uint8_t { FULL = 1, ALL_HALVES = 2, HASH_INPUT = 3 };

struct Sample {
  int64_t index;
  uint16_t half;
};

struct RoundCase {
  DType dtype;
  CaseKind kind;
  uint32_t seed;
  std::vector<int64_t> shape;
  std::vector<float> input;      // FULL only
  std::vector<uint16_t> output;  // FULL only: ComfyUI's result as float16
  uint64_t hash = 0;             // others: FNV-1a 64 of the result (Note in the README)
  std::vector<Sample> samples;
};

struct RNEEntry {
  float x;
  uint8_t e4m3, e5m2, neg_e4m3, neg_e5m2;
};

struct Golden {
  std::vector<KeySeed> keys;
  std::vector<RoundCase> cases;
  std::vector<RNEEntry> rne;
};

RoundCase read_case(GoldenReader& r) {
  RoundCase c;
  c.dtype = r.get<uint8_t>() == 0 ? DType::F8_E4M3 : DType::F8_E5M2;
  c.kind = CaseKind(r.get<uint8_t>());
  c.seed = r.get<uint32_t>();
  c.shape = r.get_n<int64_t>(r.get<uint32_t>());
  int64_t n = 1;
  for (int64_t d : c.shape) n *= d;
  if (c.kind == CaseKind::FULL) {
    c.input = r.get_n<float>(size_t(n));
    c.output = r.get_n<uint16_t>(size_t(n));
    return c;
  }
  c.hash = r.get<uint64_t>();
  const uint32_t count = r.get<uint32_t>();
  for (uint32_t i = 0; i < count; ++i) {
    const int64_t index = r.get<int64_t>();
    c.samples.push_back({index, r.get<uint16_t>()});
  }
  return c;
}

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    GoldenReader r = open_golden();
    for (uint32_t n = r.get<uint32_t>(), i = 0; i < n; ++i) {
      std::vector<char> key = r.get_n<char>(r.get<uint32_t>());
      out.keys.push_back({std::string(key.begin(), key.end()), r.get<uint32_t>()});
    }
    for (uint32_t n = r.get<uint32_t>(), i = 0; i < n; ++i) out.cases.push_back(read_case(r));
    for (uint32_t n = r.get<uint32_t>(), i = 0; i < n; ++i) {
      RNEEntry e{};
      e.x = r.get<float>();
      e.e4m3 = r.get<uint8_t>();
      e.e5m2 = r.get<uint8_t>();
      e.neg_e4m3 = r.get<uint8_t>();
      e.neg_e5m2 = r.get<uint8_t>();
      out.rne.push_back(e);
    }
    return out;
  }();
  return g;
}

float fp8_value(uint8_t code, DType dtype) {
  return dtype == DType::F8_E4M3 ? f8e4m3_to_f32(code) : f8e5m2_to_f32(code);
}

// The fp8 result as the float16 ComfyUI's function returns before its copy into fp8 (exact);
// every NaN as 0x7e00, since a NaN's sign is not part of the contract.
uint16_t result_half(uint8_t code, DType dtype) {
  const float v = fp8_value(code, dtype);
  return std::isnan(v) ? uint16_t(0x7e00) : f32_to_f16(v);
}
uint16_t canonical_half(uint16_t h) { return std::isnan(f16_to_f32(h)) ? uint16_t(0x7e00) : h; }

uint64_t fnv1a64(const std::vector<uint16_t>& halves) {
  uint64_t acc = 0xCBF29CE484222325ull;
  for (uint16_t h : halves) {
    for (uint8_t b : {uint8_t(h & 0xff), uint8_t(h >> 8)}) acc = (acc ^ b) * 0x100000001B3ull;
  }
  return acc;
}

// The inputs the golden script builds for cases it stores as a hash.
std::vector<float> case_input(const RoundCase& c, int64_t n) {
  if (c.kind == CaseKind::FULL) return c.input;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (c.kind == CaseKind::ALL_HALVES) {
      x[size_t(i)] = f16_to_f32(uint16_t(i));
    } else {
      const double h = double((uint64_t(i) * 2654435761ull) % 4294967296ull);
      x[size_t(i)] = float(h / 4294967296.0 * 8.0 - 4.0);
    }
  }
  return x;
}

std::vector<uint16_t> round_case(const RoundCase& c) {
  int64_t n = 1;
  for (int64_t d : c.shape) n *= d;
  const std::vector<float> x = case_input(c, n);
  std::vector<uint8_t> codes(size_t(n), 0xAA);  // poisoned
  fp8_stochastic_round(x.data(), c.shape[0], n / c.shape[0], c.dtype, c.seed, codes.data());
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = result_half(codes[i], c.dtype);
  return out;
}

std::string case_name(const RoundCase& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << " seed " << c.seed << " [";
  for (size_t i = 0; i < c.shape.size(); ++i) s << (i ? "," : "") << c.shape[i];
  s << "]";
  return s.str();
}

TEST(Fp8Round, GoldenHasEveryKind) {
  int kinds[4] = {};
  for (const RoundCase& c : golden().cases) ++kinds[int(c.kind)];
  EXPECT_GE(kinds[int(CaseKind::FULL)], 8);
  EXPECT_EQ(kinds[int(CaseKind::ALL_HALVES)], 2);
  EXPECT_GE(kinds[int(CaseKind::HASH_INPUT)], 4);
  EXPECT_GT(golden().rne.size(), 500u);
}

TEST(Fp8Round, StochasticRoundingMatchesComfyElementwise) {
  for (const RoundCase& c : golden().cases) {
    if (c.kind != CaseKind::FULL) continue;
    const std::vector<uint16_t> got = round_case(c);
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == canonical_half(c.output[i])) continue;
      if (++bad <= 5) {
        ADD_FAILURE() << case_name(c) << " element " << i << " input " << c.input[i] << ": got "
                      << f16_to_f32(got[i]) << ", ComfyUI " << f16_to_f32(c.output[i]);
      }
    }
    EXPECT_EQ(bad, 0) << case_name(c);
  }
}

// Every float16 bit pattern (zeros, subnormals, powers of two, max, inf, NaN) and a tensor of
// more than 4096^2 elements, which ComfyUI rounds in two slices from one generator.
TEST(Fp8Round, StochasticRoundingMatchesComfyHashes) {
  for (const RoundCase& c : golden().cases) {
    if (c.kind == CaseKind::FULL) continue;
    const std::vector<uint16_t> got = round_case(c);
    for (const Sample& s : c.samples) {
      EXPECT_EQ(got[size_t(s.index)], canonical_half(s.half))
          << case_name(c) << " element " << s.index << ": got " << f16_to_f32(got[size_t(s.index)])
          << ", ComfyUI " << f16_to_f32(s.half);
    }
    EXPECT_EQ(fnv1a64(got), c.hash) << case_name(c);
  }
}

TEST(Fp8Round, StringSeedMatchesComfy) {
  ASSERT_FALSE(golden().keys.empty());
  for (const KeySeed& k : golden().keys) {
    EXPECT_EQ(comfy_string_seed(k.key), k.seed) << "key '" << k.key << "'";
  }
  // ASCII keys: plain CRC-32 (zlib.crc32(b"123456789") == 0xCBF43926).
  EXPECT_EQ(comfy_string_seed("123456789"), 0xCBF43926u);
}

TEST(Fp8Round, RoundToNearestEvenMatchesExpectations) {
  for (const RNEEntry& e : golden().rne) {
    EXPECT_EQ(f32_to_f8e4m3(e.x), e.e4m3) << "e4m3 " << e.x;
    EXPECT_EQ(f32_to_f8e5m2(e.x), e.e5m2) << "e5m2 " << e.x;
    EXPECT_EQ(f32_to_f8e4m3(-e.x), e.neg_e4m3) << "e4m3 " << -e.x;
    EXPECT_EQ(f32_to_f8e5m2(-e.x), e.neg_e5m2) << "e5m2 " << -e.x;
  }
}

// Every fp8 value converts back to its own code (NaN codes to 0x7f/0xff).
TEST(Fp8Round, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const float v4 = f8e4m3_to_f32(code), v5 = f8e5m2_to_f32(code);
    EXPECT_EQ(f32_to_f8e4m3(v4), std::isnan(v4) ? uint8_t(code | 0x7f) : code) << c;
    if (!std::isnan(v5)) {
      EXPECT_EQ(f32_to_f8e5m2(v5), code) << c;
    }
  }
}

// The table cast of 16-bit floats equals the rounding of their widened values, for every code.
TEST(Fp8Round, HalfTableEqualsWidenedRounding) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
  std::vector<uint8_t> got(65536), want(65536);
  std::vector<float> wide(65536);
  for (DType half : {DType::F16, DType::BF16})
    for (DType fp8 : {DType::F8_E4M3, DType::F8_E5M2}) {
      for (uint32_t h = 0; h < 65536; ++h)
        wide[h] = half == DType::F16 ? f16_to_f32(all[h]) : bf16_to_f32(all[h]);
      f32_to_f8(wide.data(), fp8, want.data(), 65536);
      half_to_f8(all.data(), half, fp8, got.data(), 65536);
      for (uint32_t h = 0; h < 65536; ++h)
        ASSERT_EQ(got[h], want[h]) << dtype_name(half) << " " << h << " to " << dtype_name(fp8);
    }
}

}  // namespace
}  // namespace hr
