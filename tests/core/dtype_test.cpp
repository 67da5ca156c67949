// Tests for element types and scalar conversions (core/dtype.h) against independent
// double-precision references, plus Shape / TensorDesc / HostTensor basics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace hr {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference decode of a binary16 pattern, from the format's definition (not bit moves).
double ref_f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = std::ldexp(double(m), -24);
  } else if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(double(1024 + m), e - 25);
  }
  return s ? -v : v;
}

// Reference encode: round |x| to a multiple of the binary16 quantum at its magnitude with
// ties to even (done on integers in double, which hold every value here exactly), then
// rebuild the fields. x is finite.
uint16_t ref_f32_to_f16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a == 0) return sign;
  int e = std::ilogb(a);        // a in [2^e, 2^(e+1))
  int qexp = std::max(e, -14) - 10;  // quantum 2^qexp; subnormals share 2^-24
  double q = std::ldexp(a, -qexp);   // exact
  double fl = std::floor(q), frac = q - fl;
  double n = fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0)) n = fl + 1;
  const double r = std::ldexp(n, qexp);
  if (r >= 65536.0) return sign | 0x7c00;  // overflow
  if (r < std::ldexp(1.0, -14)) return uint16_t(sign | uint16_t(n));  // subnormal or zero
  const int re = std::ilogb(r);
  const int mant = int(std::ldexp(r, 10 - re)) - 1024;
  return uint16_t(sign | uint16_t((re + 15) << 10) | uint16_t(mant));
}

// Reference bf16 RNE: pick the nearer of the two bf16 values bracketing x (by distance in
// double), the even one at a tie. x is finite.
uint16_t ref_f32_to_bf16(float x) {
  const uint32_t u = bits(x);
  const uint16_t lo = uint16_t(u >> 16);
  if ((u & 0xffff) == 0) return lo;
  const uint16_t hi = uint16_t(lo + 1);  // next magnitude up (may be inf)
  // Past the largest finite bf16 the next step is 2^128, not infinity: values beyond the
  // midpoint to it overflow.
  double vhi = double(from_bits(uint32_t(hi) << 16));
  if (std::isinf(vhi)) vhi = std::copysign(std::ldexp(1.0, 128), vhi);
  const double dlo = std::fabs(double(x) - double(from_bits(uint32_t(lo) << 16)));
  const double dhi = std::fabs(vhi - double(x));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DType, SizesNamesAndKinds) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
  EXPECT_STREQ(dtype_name(DType::BF16), "bf16");
  for (int i = 0; i <= int(DType::F8_E5M2); ++i) {
    auto back = dtype_from_name(dtype_name(DType(i)));
    ASSERT_TRUE(back.has_value()) << dtype_name(DType(i));
    EXPECT_EQ(*back, DType(i));
  }
  EXPECT_FALSE(dtype_from_name("float32").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_TRUE(dtype_is_float(DType::F16));
  EXPECT_TRUE(dtype_is_float(DType::F8_E5M2));
  EXPECT_FALSE(dtype_is_float(DType::I32));
  EXPECT_FALSE(dtype_is_float(DType::BOOL));
}

// Every binary16 pattern decodes to the reference value and encodes back to itself; NaNs
// stay NaN with their sign.
TEST(DType, F16ExhaustiveRoundTrip) {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const double ref = ref_f16_value(uint16_t(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = f32_to_f16(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;
      EXPECT_NE(back & 0x3ff, 0) << std::hex << h;  // still NaN, not inf
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      continue;
    }
    if (double(f) != ref || std::signbit(f) != bool(h & 0x8000)) ++mismatches;
    if (f32_to_f16(f) != h) ++mismatches;
    if (mismatches > 0 && mismatches < 4) ADD_FAILURE() << "pattern 0x" << std::hex << h;
  }
  EXPECT_EQ(mismatches, 0);
}

// Around every finite half value: the value itself, the midpoint to the next one (a tie)
// and the f32 neighbours of that midpoint. Covers RNE everywhere, the subnormal range, the
// normal/subnormal boundary and the overflow threshold (65520 is the tie between 65504 and
// 65536).
TEST(DType, F16RoundingAgainstReference) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = ref_f16_value(uint16_t(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_value(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);  // exact in f32
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    for (float sgn : {1.0f, -1.0f}) {
      for (float x : {float(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        const float v = sgn * x;
        const uint16_t got = f32_to_f16(v), want = ref_f32_to_f16(v);
        if (got != want && ++bad < 5)
          ADD_FAILURE() << "x=" << v << " got 0x" << std::hex << got << " want 0x" << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  // Random f32 values across the whole half range and beyond.
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t e = 95 + rng() % 60;  // 2^-32 .. 2^27
    const float v = from_bits((rng() & 0x80000000u) | (e << 23) | (rng() & 0x7fffffu));
    ASSERT_EQ(f32_to_f16(v), ref_f32_to_f16(v)) << v;
  }
}

TEST(DType, F16SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie rounds to even: inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // A NaN whose payload sits only in the low 13 bits must not become inf.
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7f800001u)))));
  // Ties to even between 1 and 1 + 2^-10: 1 + 2^-11 goes down, 1 + 3 * 2^-11 goes up.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // Subnormals: smallest 2^-24, largest (1023 * 2^-24), smallest normal 2^-14.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest: tie to 0
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -26)), 0x0001);  // 0.75 quantum
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 quanta: tie to even 2
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);     // underflow keeps the sign
  // Rounding out of the subnormal range: 1023.5 quanta rounds up to the smallest normal.
  EXPECT_EQ(f32_to_f16(1023.5f * std::ldexp(1.0f, -24)), 0x0400);
  EXPECT_EQ(f32_to_f16(1022.5f * std::ldexp(1.0f, -24)), 0x03fe);
  // f32 subnormals are far below half's range.
  EXPECT_EQ(f32_to_f16(from_bits(0x00000001u)), 0x0000);
  EXPECT_EQ(f32_to_f16(from_bits(0x80400000u)), 0x8000);
}

TEST(DType, BF16Rounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  // Ties: 0x3f808000 is halfway between 0x3f80 (even) and 0x3f81; 0x3f818000 between
  // 0x3f81 and 0x3f82 (even).
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = f32_to_bf16(from_bits(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // Every bf16 pattern round-trips (NaN stays NaN).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 500000; ++i) {
    const float v = from_bits(rng());
    if (!std::isfinite(v)) continue;
    ASSERT_EQ(f32_to_bf16(v), ref_f32_to_bf16(v)) << std::hex << bits(v);
  }
  // Subnormal f32 inputs round like any other value.
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008001u)), 0x0001);
}

TEST(DType, F8Decode) {
  // E4M3: bias 7, no inf, S.1111.111 is NaN, max 448.
  EXPECT_EQ(f8e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(f8e4m3_to_f32(0x80)));
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(f8e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x78), 256.0f);  // exp 15 is a normal binade in E4M3
  EXPECT_EQ(f8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(f8e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  // E5M2: bias 15, IEEE-like.
  EXPECT_EQ(f8e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(f8e5m2_to_f32(0xc0), -2.0f);
  EXPECT_EQ(f8e5m2_to_f32(0x3e), 1.5f);
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f8e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(f8e5m2_to_f32(0x7c), INFINITY);
  EXPECT_EQ(f8e5m2_to_f32(0xfc), -INFINITY);
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(0x7d)));
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(0xff)));
}

// Values exact in every compute type go through every (src, dst) pair unchanged.
TEST(DType, ConvertBetweenComputeTypes) {
  const double values[] = {0, 1, -1, 2, -3, 7, 100, -128, 255, 1024};
  constexpr size_t n = std::size(values);
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::F64};
  auto fill = [&](DType t) {
    std::vector<uint8_t> buf(n * dtype_size(t));
    dtype_convert(values, DType::F64, buf.data(), t, n);
    return buf;
  };
  for (DType s : types) {
    std::vector<uint8_t> src = fill(s);
    for (DType d : types) {
      std::vector<uint8_t> dst(n * dtype_size(d));
      dtype_convert(src.data(), s, dst.data(), d, n);
      std::vector<double> back(n);
      dtype_convert(dst.data(), d, back.data(), DType::F64, n);
      for (size_t i = 0; i < n; ++i)
        EXPECT_EQ(back[i], values[i]) << dtype_name(s) << " -> " << dtype_name(d) << " #" << i;
    }
  }
}

TEST(DType, ConvertRoundingAndTruncation) {
  // Float -> integer truncates toward zero.
  const float f[] = {2.7f, -2.7f, 0.5f, -0.5f, 1e6f};
  int32_t i32[5];
  int64_t i64[5];
  dtype_convert(f, DType::F32, i32, DType::I32, 5);
  dtype_convert(f, DType::F32, i64, DType::I64, 5);
  const int64_t want[] = {2, -2, 0, 0, 1000000};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(i32[i], want[i]);
    EXPECT_EQ(i64[i], want[i]);
  }
  // f32 -> f16 / bf16 through dtype_convert equals the scalar functions.
  std::mt19937 rng(3);
  std::vector<float> src(4096);
  for (float& v : src) v = std::ldexp(float(rng() % 100000) - 50000.0f, -int(rng() % 30));
  std::vector<uint16_t> h(src.size()), b(src.size());
  dtype_convert(src.data(), DType::F32, h.data(), DType::F16, src.size());
  dtype_convert(src.data(), DType::F32, b.data(), DType::BF16, src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(h[i], f32_to_f16(src[i]));
    ASSERT_EQ(b[i], f32_to_bf16(src[i]));
  }
  // f16 -> bf16 for every pattern matches going through f32 (exact for both).
  std::vector<uint16_t> all(65536), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  dtype_convert(all.data(), DType::F16, out.data(), DType::BF16, all.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float f = f16_to_f32(uint16_t(i));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(out[i])));
    } else {
      ASSERT_EQ(out[i], f32_to_bf16(f)) << std::hex << i;
    }
  }
  // f64 -> f16 rounds once: 1 + 2^-11 + 2^-40 is just above the tie between 1 and
  // 1 + 2^-10, so it rounds up; rounding to f32 first would land on the tie and go down.
  const double d[] = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                      1.0 + std::ldexp(1.0, -11) - std::ldexp(1.0, -40),
                      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)};
  uint16_t h3[3], b3[3];
  dtype_convert(d, DType::F64, h3, DType::F16, 3);
  dtype_convert(d, DType::F64, b3, DType::BF16, 3);
  EXPECT_EQ(h3[0], 0x3c01);
  EXPECT_EQ(h3[1], 0x3c00);
  EXPECT_EQ(b3[2], 0x3f81);  // bf16 tie at 1 + 2^-8, nudged up
  EXPECT_EQ(b3[1], 0x3f80);
}

TEST(DType, ConvertFromStorageTypes) {
  const int8_t i8[] = {-128, -1, 0, 127};
  const uint8_t u8[] = {0, 1, 200, 255};
  const int16_t i16[] = {-32768, -5, 5, 32767};
  const uint8_t b[] = {0, 1, 1, 0};
  const uint8_t e4[] = {0x38, 0xb8, 0x7e, 0x01};
  const uint8_t e5[] = {0x3c, 0xc0, 0x7b, 0x7c};
  float out[4];
  dtype_convert(i8, DType::I8, out, DType::F32, 4);
  EXPECT_EQ(out[0], -128.0f);
  EXPECT_EQ(out[3], 127.0f);
  dtype_convert(u8, DType::U8, out, DType::F32, 4);
  EXPECT_EQ(out[2], 200.0f);
  EXPECT_EQ(out[3], 255.0f);
  dtype_convert(i16, DType::I16, out, DType::F32, 4);
  EXPECT_EQ(out[0], -32768.0f);
  EXPECT_EQ(out[2], 5.0f);
  dtype_convert(b, DType::BOOL, out, DType::F32, 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 1.0f);
  dtype_convert(e4, DType::F8_E4M3, out, DType::F32, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[2], 448.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -9));
  uint16_t h[4];
  dtype_convert(e5, DType::F8_E5M2, h, DType::F16, 4);
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0xc000);
  EXPECT_EQ(h[2], 0x7b00);
  EXPECT_EQ(h[3], 0x7c00);
  int64_t i64[4];
  dtype_convert(i16, DType::I16, i64, DType::I64, 4);
  EXPECT_EQ(i64[0], -32768);
  EXPECT_EQ(i64[3], 32767);
}

TEST(Shape, Basics) {
  Shape s{2, 4, 8, 16};
  EXPECT_EQ(s.rank, 4);
  EXPECT_EQ(s.numel(), 1024);
  EXPECT_EQ(s.prod(1, 3), 32);
  EXPECT_EQ(s.prod(2, 2), 1);
  EXPECT_EQ(s[-1], 16);
  EXPECT_EQ(s[0], 2);
  s[-1] = 3;
  EXPECT_EQ(s.dims[3], 3);
  EXPECT_EQ(s.str(), "[2, 4, 8, 3]");
  EXPECT_EQ(Shape().numel(), 1);  // a scalar
  EXPECT_EQ(Shape().str(), "[]");
  EXPECT_EQ(Shape({3, 0}).numel(), 0);
  EXPECT_EQ(Shape({1, 2}), Shape({1, 2}));
  EXPECT_NE(Shape({1, 2}), Shape({2, 1}));
  EXPECT_NE(Shape({2}), Shape({2, 1}));
}

TEST(TensorDesc, BytesAndStr) {
  TensorDesc d{DType::F16, Shape{2, 4, 64, 64}};
  EXPECT_EQ(d.numel(), 32768);
  EXPECT_EQ(d.bytes(), 65536u);
  EXPECT_EQ(d.str(), "f16[2, 4, 64, 64]");
  EXPECT_EQ(d, (TensorDesc{DType::F16, Shape{2, 4, 64, 64}}));
  EXPECT_NE(d, (TensorDesc{DType::BF16, Shape{2, 4, 64, 64}}));
}

TEST(HostTensor, ZeroFilledCloneConvertReshape) {
  HostTensor t(DType::F32, Shape{3, 5});
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.f32()[i], 0.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(i) - 7.0f;
  HostTensor c = t.clone();
  EXPECT_NE(c.data(), t.data());
  EXPECT_EQ(std::memcmp(c.data(), t.data(), t.bytes()), 0);
  HostTensor h = t.to(DType::F16);
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(h.shape(), t.shape());
  EXPECT_EQ(static_cast<const uint16_t*>(h.data())[0], f32_to_f16(-7.0f));
  HostTensor r = std::move(c).reshaped(Shape{15});
  EXPECT_EQ(r.shape(), Shape{15});
  EXPECT_EQ(r.f32()[14], 7.0f);
  HostTensor moved = std::move(r);
  EXPECT_TRUE(r.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.f32()[0], -7.0f);
  TensorRef ref = moved.ref();
  EXPECT_EQ(ref.data, moved.data());
  EXPECT_EQ(ref.desc, moved.desc());
  HostTensor empty_shape(DType::F32, Shape{0, 4});
  EXPECT_EQ(empty_shape.bytes(), 0u);
  EXPECT_FALSE(empty_shape.empty());  // still owns a (minimal) allocation
}

}  // namespace
}  // namespace hr
