// fp8 rounding: torch's round-to-nearest-even casts and ComfyUI's stochastic rounding, with the
// float16 arithmetic and torch CPU generator stream that make it bit-identical.
#include "core/fp8_round.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace hr {

namespace {

// Round-to-nearest-even of a finite, non-negative value onto an fp8 grid with `mbits` mantissa
// bits and exponent bias `bias`. Returns the code without sign; a carry out of the largest
// exponent gives the code above it (480's NaN code for e4m3fn, inf for e5m2), as torch does.
uint8_t fp8_rne_magnitude(float a, int mbits, int bias) {
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  if (a < std::ldexp(1.0f, min_exp)) {
    // Subnormal: multiples of 2^(min_exp - mbits); scaling by a power of two is exact, so
    // nearbyint (round to nearest even) rounds the real value. 2^mbits is the smallest normal.
    return uint8_t(std::nearbyint(std::ldexp(a, mbits - min_exp)));
  }
  // Normal: keep the top mbits of the float's 23-bit mantissa, rounding the dropped bits to
  // nearest even (a carry moves into the exponent field, which is the right next value).
  const int drop = 23 - mbits;
  uint32_t b;
  std::memcpy(&b, &a, 4);
  b += (1u << (drop - 1)) - 1u + ((b >> drop) & 1u);
  return uint8_t((b >> drop) - (uint32_t(127 - bias) << mbits));
}

uint8_t sign_bit(float f) { return std::signbit(f) ? 0x80 : 0x00; }

}  // namespace

uint8_t f32_to_f8e4m3(float f) {
  const float a = std::fabs(f);
  if (std::isnan(a) || a >= 480.0f) return uint8_t(0x7f | sign_bit(f));
  return uint8_t(fp8_rne_magnitude(a, 3, 7) | sign_bit(f));
}

uint8_t f32_to_f8e5m2(float f) {
  const float a = std::fabs(f);
  if (std::isnan(a)) return uint8_t(0x7f | sign_bit(f));
  if (a >= 65536.0f) return uint8_t(0x7c | sign_bit(f));
  return uint8_t(fp8_rne_magnitude(a, 2, 15) | sign_bit(f));
}

void f32_to_f8(const float* src, DType fp8, uint8_t* dst, int64_t n) {
  if (!dtype_is_fp8(fp8)) std::abort();  // a caller's bug
  const bool e4m3 = fp8 == DType::F8_E4M3;
  for (int64_t i = 0; i < n; ++i) dst[i] = e4m3 ? f32_to_f8e4m3(src[i]) : f32_to_f8e5m2(src[i]);
}

// Note [fp8 cast table]
// Storing a 16-bit checkpoint in fp8 at load (UNETLoader's weight_dtype) casts every value: the
// rounding above took ~13 ns a value, 150 s of one thread for Flux.1-dev's 11.9 G weights (the
// 2026-12-04 H200 workflow run timed out in it). A 16-bit value widens to f32 exactly, so its fp8
// code is a function of its 16 bits: a table of the 65536 codes, built once per (half, fp8) pair
// from f32_to_f8, gives the same bytes at a load and a store a value.
namespace {

using CastTable = std::vector<uint8_t>;

CastTable make_cast_table(DType half, DType fp8) {
  CastTable t(65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half == DType::F16 ? f16_to_f32(uint16_t(h)) : bf16_to_f32(uint16_t(h));
    t[h] = fp8 == DType::F8_E4M3 ? f32_to_f8e4m3(f) : f32_to_f8e5m2(f);
  }
  return t;
}

const CastTable& cast_table(DType half, DType fp8) {
  static const CastTable tables[2][2] = {
      {make_cast_table(DType::F16, DType::F8_E4M3), make_cast_table(DType::F16, DType::F8_E5M2)},
      {make_cast_table(DType::BF16, DType::F8_E4M3), make_cast_table(DType::BF16, DType::F8_E5M2)}};
  return tables[half == DType::BF16][fp8 == DType::F8_E5M2];
}

}  // namespace

void half_to_f8(const uint16_t* src, DType half, DType fp8, uint8_t* dst, int64_t n) {
  if (!dtype_is_fp8(fp8) || (half != DType::F16 && half != DType::BF16)) std::abort();  // a bug
  const uint8_t* t = cast_table(half, fp8).data();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[src[i]];
}

// Note [comfy string seed]
// ComfyUI seeds the stochastic rounding of each weight with string_to_seed(key): CRC-32
// (reflected polynomial 0xEDB88320, register starting at and finally xored with 0xFFFFFFFF),
// except that Python iterates the str, so each step xors ord(char), a whole Unicode code point
// (up to 21 bits), into the register instead of a byte. For ASCII keys it equals zlib.crc32;
// for others the UTF-8 is decoded first. A malformed UTF-8 byte counts as its own code point.
namespace {

// Decodes one code point at s[i], advancing i.
uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return uint32_t(uint8_t(s[k])); };
  const uint32_t b0 = byte(i);
  const int len = b0 < 0x80         ? 1
                  : (b0 >> 5) == 6  ? 2
                  : (b0 >> 4) == 14 ? 3
                  : (b0 >> 3) == 30 ? 4
                                    : 0;
  if (len <= 1 || i + size_t(len) > s.size()) {
    ++i;
    return b0;
  }
  uint32_t cp = b0 & (0x7fu >> len);
  for (int k = 1; k < len; ++k) {
    const uint32_t b = byte(i + size_t(k));
    if ((b >> 6) != 2) {  // not a continuation byte: malformed
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  i += size_t(len);
  return cp;
}

}  // namespace

uint32_t comfy_string_seed(std::string_view key) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < key.size();) {
    crc ^= utf8_next(key, i);
    for (int b = 0; b < 8; ++b) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return crc ^ 0xFFFFFFFFu;
}

// Note [comfy stochastic rounding]
// comfy/float.py manual_stochastic_round_to_float8, per element, every step a float16 tensor op
// (torch computes each in float32 and rounds to half; for +, -, *, / of halves that is the
// correctly rounded half result):
//   x = half(v); sign = sign(x) (NaN -> 0), 0 where |x| == 0; a = |x|
//   e = clamp(floor(half(log2(a))) + bias, 0, 2^ebits - 1)      (NaN stays NaN)
//   normal (e != 0): s = (a / 2^(e - bias) - 1) * 2^mbits        2^(e - bias) is a half: 2^16 = inf
//   subnormal:       s = a / 2^(1 - bias - mbits)
//   m = floor(s + u) / 2^mbits, u = torch.rand(dtype=float16): the one inexact rounding that
//       matters, half(s + u)
//   r = sign * (normal ? 2^(e - bias) * (1 + m) : 2^(1 - bias) * m), clamped to +-finfo.max
// Quirks kept: log2 is rounded to half before the floor, so a value just below a power of two
// >= 8 (or <= 1/4) takes the exponent above it and its mantissa goes negative (94 of the positive
// finite halves); e5m2 inputs whose exponent reaches 31 (half value >= 65376, and inf) compute
// 2^16 = inf, then inf * 0, and come out NaN.
// The log2 rounding does not depend on which float32 log2 torch uses: over every positive
// finite half, floor(half(log2)) is the same for results 1 float ulp either side.
//
// Note [torch cpu rand half]
// torch.rand(n, dtype=float16, generator=g) on the CPU (DistributionTemplates.h uniform_kernel,
// a serial kernel; uniform_real in TransformationHelper.h) takes one 32-bit mt19937 draw per
// element in memory order and keeps the low 11 bits (numeric_limits<Half>::digits):
// u = (r & 0x7ff) / 2048. The generator is torch's mt19937 seeded with the seed's low 32 bits,
// which is std::mt19937's seeding (as TorchCPUGenerator in sampling/torch_rng.h; core cannot
// use it). stochastic_rounding splits dim 0 into slices of round(rows / max(1, numel / 4096^2))
// rows and draws torch.rand per slice from one generator; the slices are contiguous and in
// order, so the stream is one draw per element in row-major order whatever the slicing.
namespace {

float to_half(float v) { return f16_to_f32(f32_to_f16(v)); }

// to_half for the per-element path: values whose float16 is normal and finite round in place
// (round to nearest even on the float's 13 dropped mantissa bits); the rest take to_half.
inline float to_half_fast(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t mag = b & 0x7fffffffu;
  if (mag < 0x38800000u || mag >= 0x477fe000u) return to_half(v);  // < 2^-14 or >= 65520
  b = (b + 0xfffu + ((b >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&v, &b, 4);
  return v;
}

struct Fp8Format {
  int ebits, mbits, bias;
  float max;  // torch.finfo(dtype).max
};
constexpr Fp8Format kE4M3{4, 3, 7, 448.0f};
constexpr Fp8Format kE5M2{5, 2, 15, 57344.0f};

float pow2_half(float e) { return std::isnan(e) ? e : to_half(std::ldexp(1.0f, int(e))); }

// What an element needs from its float16 value before the random draw (Note [fp8 half plan]).
struct HalfPlan {
  float s;      // mantissa_scaled: the value the draw is added to
  float scale;  // normal: 2^(e - bias) (a half: may be inf or NaN); subnormal: 2^(1 - bias)
  float sign;   // -1, 0 or 1; 0 for zeros and NaN
  bool normal;
};

HalfPlan plan_half(float x, const Fp8Format& f) {
  const float a = std::fabs(x);
  HalfPlan hp;
  hp.sign = (a == 0.0f || std::isnan(x)) ? 0.0f : (x > 0.0f ? 1.0f : -1.0f);
  float e = std::floor(to_half(std::log2(a))) + float(f.bias);
  e = std::isnan(e) ? e : std::fmin(std::fmax(e, 0.0f), float((1 << f.ebits) - 1));
  hp.normal = !(e == 0.0f);
  const float steps = float(1 << f.mbits);
  if (hp.normal) {
    hp.scale = pow2_half(e - float(f.bias));
    hp.s = to_half(to_half(to_half(a / hp.scale) - 1.0f) * steps);
  } else {
    hp.scale = std::ldexp(1.0f, 1 - f.bias);
    hp.s = to_half(a / std::ldexp(1.0f, 1 - f.bias - f.mbits));
  }
  return hp;
}

// From the draw on: m = floor(s + u) / 2^mbits, the value rebuilt, signed and clamped.
float finish_half(const HalfPlan& hp, const Fp8Format& f, uint32_t draw) {
  const float u = float(draw & 0x7ffu) / 2048.0f;  // Note [torch cpu rand half]
  const float m = to_half_fast(std::floor(to_half_fast(hp.s + u)) / float(1 << f.mbits));
  const float r =
      hp.normal ? to_half_fast(hp.scale * to_half_fast(1.0f + m)) : to_half_fast(hp.scale * m);
  const float out = hp.sign * r;
  return std::isnan(out) ? out : std::fmin(std::fmax(out, -f.max), f.max);
}

// Note [fp8 half plan]
// Everything before the draw depends only on the element's float16 value, so it is worked out
// once for each of the 65536 float16 bit patterns per format (about 1 MB, built on first use);
// an element then costs a table look-up and the few float16 roundings after the draw. This is
// the same arithmetic as element by element (the golden's every-float16 case checks all entries).
const std::vector<HalfPlan>& half_plans(bool e4m3) {
  static const auto build = [](const Fp8Format& f) {
    std::vector<HalfPlan> plans(65536);
    for (uint32_t h = 0; h < 65536; ++h) plans[h] = plan_half(f16_to_f32(uint16_t(h)), f);
    return plans;
  };
  static const std::vector<HalfPlan> e4m3_plans = build(kE4M3);
  static const std::vector<HalfPlan> e5m2_plans = build(kE5M2);
  return e4m3 ? e4m3_plans : e5m2_plans;
}

}  // namespace

void fp8_stochastic_round(const float* src, int64_t rows, int64_t row_elems, DType dtype,
                          uint64_t seed, uint8_t* dst) {
  if (dtype != DType::F8_E4M3 && dtype != DType::F8_E5M2) std::abort();  // caller's bug
  const bool e4m3 = dtype == DType::F8_E4M3;
  const Fp8Format& f = e4m3 ? kE4M3 : kE5M2;
  const std::vector<HalfPlan>& plans = half_plans(e4m3);
  std::mt19937 gen(uint32_t(seed & 0xFFFFFFFFu));  // Note [torch cpu rand half]
  const int64_t n = rows * row_elems;
  for (int64_t i = 0; i < n; ++i) {
    const float r = finish_half(plans[f32_to_f16(src[i])], f, uint32_t(gen()));  // x.half()
    dst[i] = e4m3 ? f32_to_f8e4m3(r) : f32_to_f8e5m2(r);  // r is on the fp8 grid: exact
  }
}

}  // namespace hr
