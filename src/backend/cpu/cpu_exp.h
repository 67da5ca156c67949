// exp_approx, the vectorisable exp shared by the CPU norm, softmax and attention kernels.
// Include it after `#pragma GCC optimize("no-trapping-math")` (Note [vectorised float loops] in
// cpu_norm.cpp): every includer does, so the inline definition is compiled the same everywhere.
#pragma once

#include <cstdint>

namespace hr::cpu {

// exp(x) to ~1 ulp for x in [-87, 88] (clamped outside); Cody-Waite reduction + degree-6
// polynomial, branch-free so that it vectorises.
inline float exp_approx(float x) {
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  const float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x/ln2)
  float r = x - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // __builtin_bit_cast, not std::bit_cast: <bit> is compiled outside the no-trapping-math region,
  // and GCC does not inline a function whose optimize options differ from its caller's, so
  // std::bit_cast became one call per element and the loop stopped vectorising.
  return p * __builtin_bit_cast(float, (int32_t(fn) + 127) << 23);
}

}  // namespace hr::cpu
