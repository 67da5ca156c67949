// Relative error ||a - b|| / ||b|| of two f32 host tensors, the measure every golden test uses.
// Tensors of different shapes fail the calling test and give infinity.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/tensor.h"

namespace hr::test {

inline double rel_err(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double d = double(a.f32()[i]) - double(b.f32()[i]);
    num += d * d;
    den += double(b.f32()[i]) * double(b.f32()[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace hr::test
