// Shape helpers.
#include "core/shape.h"

#include <cstdlib>

namespace hr {

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > size_t(kMaxDims)) std::abort();
  for (int64_t v : d) dims[rank++] = v;
}

int64_t Shape::numel() const { return prod(0, rank); }

int64_t Shape::prod(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace hr
