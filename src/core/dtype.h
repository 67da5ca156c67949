// Element types: compute types (F32, F16, BF16, I32, I64) and storage-only types that
// checkpoints use (F64, I8, U8, I16, BOOL, F8_E4M3, F8_E5M2), with exact scalar conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hr {

enum class DType : uint8_t {
  F32 = 0,
  F16,
  BF16,
  I32,
  I64,
  // storage-only (converted on load; ops do not take them)
  F64,
  I8,
  U8,
  I16,
  BOOL,
  F8_E4M3,
  F8_E5M2,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f16", ...
std::optional<DType> dtype_from_name(std::string_view name);  // accepts dtype_name() spellings
bool dtype_is_float(DType t);
bool dtype_is_fp8(DType t);  // F8_E4M3 or F8_E5M2

// IEEE binary16 <-> binary32; round-to-nearest-even, subnormals, inf and NaN exact.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
// bfloat16 <-> binary32; round-to-nearest-even, NaN stays NaN.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
// OCP FP8 E4M3 (no inf, NaN = S.1111.111) and E5M2 (IEEE-like) to binary32.
float f8e4m3_to_f32(uint8_t v);
float f8e5m2_to_f32(uint8_t v);

// Element-wise conversion of n values. Any source type; destination a compute type.
// Float -> integer truncates toward zero.
void dtype_convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace hr
