// Scalar conversions between element types.
#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace hr {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F64: return 8;
    case DType::I8: return 1;
    case DType::U8: return 1;
    case DType::I16: return 2;
    case DType::BOOL: return 1;
    case DType::F8_E4M3: return 1;
    case DType::F8_E5M2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F64: return "f64";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::I16: return "i16";
    case DType::BOOL: return "bool";
    case DType::F8_E4M3: return "f8_e4m3";
    case DType::F8_E5M2: return "f8_e5m2";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i <= int(DType::F8_E5M2); ++i) {
    if (name == dtype_name(DType(i))) return DType(i);
  }
  return std::nullopt;
}

bool dtype_is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 ||
         t == DType::F8_E4M3 || t == DType::F8_E5M2;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x = bits_of(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN; keep NaN quiet and non-zero
    return uint16_t(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0u));
  }
  int e = int(exp) - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    // Subnormal half (or zero). Value = 1.man * 2^(exp-127); half subnormal unit is 2^-24.
    if (e < -10) return uint16_t(sign);  // below half the smallest subnormal: rounds to 0
    uint32_t m = man | 0x800000u;        // 24-bit significand
    int shift = 14 - e;                  // bits to drop
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);  // q may carry into the exponent field: correct
  }
  uint32_t q = (uint32_t(e) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry may make inf: correct
  return uint16_t(sign | q);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return float_of(sign);
    // subnormal: man * 2^-24, exact in f32
    float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (man << 13));
  return float_of(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t f32_to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return uint16_t(x >> 16);
}

float bf16_to_f32(uint16_t h) { return float_of(uint32_t(h) << 16); }

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = NAN;
  } else if (exp == 0) {
    r = std::ldexp(float(man), -9);  // man/8 * 2^-6
  } else {
    r = std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
  }
  return sign ? -r : r;
}

float f8e5m2_to_f32(uint8_t v) { return f16_to_f32(uint16_t(uint16_t(v) << 8)); }

namespace {
struct F16Val {
  uint16_t v;
  explicit operator float() const { return f16_to_f32(v); }
};
struct BF16Val {
  uint16_t v;
  explicit operator float() const { return bf16_to_f32(v); }
};
struct E4M3Val {
  uint8_t v;
  explicit operator float() const { return f8e4m3_to_f32(v); }
};
struct E5M2Val {
  uint8_t v;
  explicit operator float() const { return f8e5m2_to_f32(v); }
};
template <typename T>
T as_num(T v) {
  return v;
}
float as_num(F16Val v) { return f16_to_f32(v.v); }
float as_num(BF16Val v) { return bf16_to_f32(v.v); }
float as_num(E4M3Val v) { return f8e4m3_to_f32(v.v); }
float as_num(E5M2Val v) { return f8e5m2_to_f32(v.v); }
}  // namespace

// Float -> integer saturates (NaN -> 0) instead of the undefined behaviour of a plain cast.
template <typename To, typename From>
To saturate(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    if (std::isnan(v)) return 0;
    if (double(v) >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (double(v) <= double(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
  } else if constexpr (sizeof(From) > sizeof(To)) {
    if (v > From(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v < From(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
  }
  return To(v);
}

template <typename Src>
static void convert_from(const Src* s, void* dst, DType dst_type, size_t n) {
  switch (dst_type) {
    case DType::F32: {
      float* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float(as_num(s[i]));
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(float(as_num(s[i])));
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(float(as_num(s[i])));
      return;
    }
    case DType::I32: {
      int32_t* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = saturate<int32_t>(as_num(s[i]));
      return;
    }
    case DType::I64: {
      int64_t* d = static_cast<int64_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = saturate<int64_t>(as_num(s[i]));
      return;
    }
    case DType::F64: {
      double* d = static_cast<double*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = double(as_num(s[i]));
      return;
    }
    default: return;  // storage-only destinations are not produced
  }
}


void dtype_convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  // Exact paths between the 16-bit float types go through f32, which represents both exactly.
  switch (src_type) {
    case DType::F32: return convert_from(static_cast<const float*>(src), dst, dst_type, n);
    case DType::F16: return convert_from(static_cast<const F16Val*>(src), dst, dst_type, n);
    case DType::BF16: return convert_from(static_cast<const BF16Val*>(src), dst, dst_type, n);
    case DType::I32:
    case DType::I64:
      if (dst_type == DType::F16 || dst_type == DType::BF16) {
        // Through f64 (exact for i32, one rounding for i64) so the 16-bit result rounds once.
        std::vector<double> tmp(n);
        if (src_type == DType::I32) convert_from(static_cast<const int32_t*>(src), tmp.data(), DType::F64, n);
        else convert_from(static_cast<const int64_t*>(src), tmp.data(), DType::F64, n);
        return dtype_convert(tmp.data(), DType::F64, dst, dst_type, n);
      }
      if (src_type == DType::I32) return convert_from(static_cast<const int32_t*>(src), dst, dst_type, n);
      return convert_from(static_cast<const int64_t*>(src), dst, dst_type, n);
    case DType::F64: {
      // f64 -> f16/bf16 must round once, not twice through f32.
      const double* s = static_cast<const double*>(src);
      if (dst_type == DType::F16 || dst_type == DType::BF16) {
        uint16_t* d = static_cast<uint16_t*>(dst);
        for (size_t i = 0; i < n; ++i) {
          // Round-to-odd into f32 keeps the later RNE step exact (no double rounding).
          float f = float(s[i]);
          if (std::isfinite(f) && double(f) != s[i]) {
            // Bracketing floats have consecutive bit patterns: exactly one is odd.
            float g = std::nextafter(f, double(f) < s[i] ? INFINITY : -INFINITY);
            if ((bits_of(f) & 1u) == 0) f = g;
          }
          d[i] = dst_type == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
        }
        return;
      }
      return convert_from(s, dst, dst_type, n);
    }
    case DType::I8: return convert_from(static_cast<const int8_t*>(src), dst, dst_type, n);
    case DType::U8: return convert_from(static_cast<const uint8_t*>(src), dst, dst_type, n);
    case DType::I16: return convert_from(static_cast<const int16_t*>(src), dst, dst_type, n);
    case DType::BOOL: return convert_from(static_cast<const uint8_t*>(src), dst, dst_type, n);
    case DType::F8_E4M3: return convert_from(static_cast<const E4M3Val*>(src), dst, dst_type, n);
    case DType::F8_E5M2: return convert_from(static_cast<const E5M2Val*>(src), dst, dst_type, n);
  }
}

}  // namespace hr
