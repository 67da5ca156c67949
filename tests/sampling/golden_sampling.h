// Shared access to golden-sampling.safetensors for the sampling tests, and float comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "models/safetensors.h"
#include "test_paths.h"

namespace hr::test {

// tests/data/golden/<rel> opened, or null (and the caller fails) when it does not open. Callers
// keep it in a function-local static so that each file is opened once.
inline std::unique_ptr<SafetensorsFile> golden_file(const std::string& rel) {
  auto r = SafetensorsFile::open(golden_path(rel));
  return r.ok() ? std::move(r).value() : nullptr;
}

inline const SafetensorsFile* golden_sampling() {
  static const std::unique_ptr<SafetensorsFile> file = golden_file("golden-sampling.safetensors");
  return file.get();
}

#define HR_GOLDEN_OR_FAIL(g)                                      \
  const ::hr::SafetensorsFile* g = ::hr::test::golden_sampling(); \
  ASSERT_NE(g, nullptr) << "tests/data/golden/golden-sampling.safetensors did not open"

// Distance in units in the last place between two finite floats of the same sign region.
inline int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  // Map to a monotone integer line.
  int64_t la = ia < 0 ? int64_t(INT32_MIN) - ia : ia;
  int64_t lb = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
  return la > lb ? la - lb : lb - la;
}

struct FloatDiff {
  int64_t n = 0;
  int64_t exact = 0;
  int64_t max_ulp = 0;
  double max_abs = 0;
  double max_rel = 0;  // relative to the reference's max |x|
  double exact_fraction() const { return n ? double(exact) / double(n) : 1.0; }
};

inline FloatDiff float_diff(const float* got, const float* ref, int64_t n) {
  FloatDiff d;
  d.n = n;
  double ref_max = 0;
  for (int64_t i = 0; i < n; ++i) ref_max = std::max(ref_max, double(std::fabs(ref[i])));
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &ref[i], 4) == 0) ++d.exact;
    d.max_ulp = std::max(d.max_ulp, ulp_distance(got[i], ref[i]));
    d.max_abs = std::max(d.max_abs, std::fabs(double(got[i]) - double(ref[i])));
  }
  d.max_rel = ref_max > 0 ? d.max_abs / ref_max : d.max_abs;
  return d;
}

}  // namespace hr::test
