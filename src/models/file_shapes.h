// The shapes of a checkpoint's tensors under a prefix, as a family's config detection reads them:
// a missing or wrongly ranked tensor is an error naming the file, the family and the key.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "models/safetensors.h"

namespace hr {

class FileShapes {
 public:
  // `family` names the model in errors ("Flux", "Z-Image").
  FileShapes(const SafetensorsFile& f, std::string_view prefix, std::string_view family)
      : f_(f), prefix_(prefix), family_(family) {}
  const Shape* find(const std::string& name) const;
  // The shape of `name`: NOT_FOUND when absent, CORRUPT when its rank is not `rank`.
  Result<Shape> need(const std::string& name, int rank) const;
  // How many of pattern's names exist for 0, 1, ... (pattern has one "{}"), up to the first gap.
  int count(const char* pattern) const;

 private:
  const SafetensorsFile& f_;
  std::string prefix_, family_;
};

}  // namespace hr
