// The ladder of Note [vram classes] and lookups in it.
#include "jobs/vram_class.h"

#include <algorithm>

namespace hr {

const std::vector<uint64_t>& vram_classes() {
  static const std::vector<uint64_t> ladder = [] {
    std::vector<uint64_t> v;
    for (uint64_t b = 4ull << 20; b <= (1ull << 40); b *= 2) {
      v.push_back(b);
      if (b < (1ull << 40)) v.push_back(b + b / 2);
    }
    return v;
  }();
  return ladder;
}

uint64_t vram_class_for(uint64_t needed) {
  const std::vector<uint64_t>& v = vram_classes();
  auto it = std::lower_bound(v.begin(), v.end(), needed);
  return it == v.end() ? v.back() : *it;
}

std::vector<uint64_t> vram_classes_upto(uint64_t budget) {
  std::vector<uint64_t> out;
  for (uint64_t c : vram_classes())
    if (c <= budget) out.push_back(c);
  std::reverse(out.begin(), out.end());
  return out;
}

std::string vram_class_name(uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  return std::to_string(bytes >> 20) + "MiB";
}

}  // namespace hr
