// Rounding to fp8 (F8_E4M3 = float8_e4m3fn, F8_E5M2) as torch and ComfyUI do it: torch's
// round-to-nearest-even casts, and ComfyUI's seeded stochastic rounding with its per-key seed.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace hr {

// Note [which fp8 rounding]
// ComfyUI a125cd84 (read, not run): a float16/bf16 checkpoint stored as fp8 at load
// (UNETLoader weight_dtype fp8_*) goes through load_state_dict, i.e. torch's param.copy_ into an
// fp8 parameter: round to nearest even, f32_to_f8e4m3/e5m2 of the exactly widened value.
// Stochastic rounding is what ComfyUI applies when it writes a computed weight back into an fp8
// weight: LoRA and other patches (model_patcher patch_weight_to_device, the float32 result, seed
// string_to_seed of the model key such as "diffusion_model.input_blocks.1.1.proj_in.weight") and
// scaled-fp8 layers' set_weight (weight / scale_weight, same seed).

// torch's `.to(torch.float8_e4m3fn)` of a float: round to nearest even; |x| > 464 (it would
// round to 480, the NaN code) and NaN give NaN 0x7f with the sign bit; e4m3fn has no inf.
uint8_t f32_to_f8e4m3(float f);
// torch's `.to(torch.float8_e5m2)`: round to nearest even; |x| >= 61440 rounds to inf (0x7c),
// NaN gives 0x7f, both with the sign bit.
uint8_t f32_to_f8e5m2(float f);
// The same cast of n floats to `fp8` (F8_E4M3 or F8_E5M2; others abort).
void f32_to_f8(const float* src, DType fp8, uint8_t* dst, int64_t n);

// The same cast of n 16-bit floats (`half` F16 or BF16, their bit patterns) to `fp8`: equal to
// f32_to_f8 of the exactly widened values, by a table of all 65536 codes (Note [fp8 cast table]).
void half_to_f8(const uint16_t* src, DType half, DType fp8, uint8_t* dst, int64_t n);

// ComfyUI's string_to_seed(key) (comfy/model_patcher.py): a reflected CRC-32 that xors whole
// code points, not bytes, into the register; see Note [comfy string seed]. `key` is UTF-8.
uint32_t comfy_string_seed(std::string_view key);

// ComfyUI's stochastic_rounding(value, float8 dtype, seed) (comfy/float.py) on the CPU, for a
// row-major float32 tensor of `rows` rows of `row_elems` values each (rows is dim 0; the other
// dims are flattened into row_elems). dtype is F8_E4M3 or F8_E5M2 (others abort); dst gets rows *
// row_elems fp8 codes, bit-identical to torch's result except that a NaN's sign is not specified.
// See Note [comfy stochastic rounding].
void fp8_stochastic_round(const float* src, int64_t rows, int64_t row_elems, DType dtype,
                          uint64_t seed, uint8_t* dst);

}  // namespace hr
