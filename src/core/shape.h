// Shapes: up to kMaxDims dimensions, row-major (the last dimension is contiguous).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace hr {

constexpr int kMaxDims = 6;

struct Shape {
  int rank = 0;
  int64_t dims[kMaxDims] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);

  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i < 0 ? i + rank : i]; }
  int64_t& operator[](int i) { return dims[i < 0 ? i + rank : i]; }
  // Product of dims [begin, end).
  int64_t prod(int begin, int end) const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 4, 64, 64]"
};

}  // namespace hr
