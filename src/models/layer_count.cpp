// Counting a checkpoint's numbered layers (layer_count.h).
#include "models/layer_count.h"

#include <set>

namespace hr {

int numbered_layers(const std::vector<std::string>& names, const std::string& prefix) {
  std::set<int> seen;
  for (const std::string& n : names) {
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    size_t end = n.find('.', prefix.size());
    if (end == std::string::npos) continue;
    try {
      seen.insert(std::stoi(n.substr(prefix.size(), end - prefix.size())));
    } catch (...) {
    }
  }
  int n = 0;
  while (seen.count(n)) ++n;
  return n;
}

}  // namespace hr
