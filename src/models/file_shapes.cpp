// A checkpoint's tensor shapes under a prefix, looked up for config detection.
#include "models/file_shapes.h"

#include <fmt/format.h>

namespace hr {

const Shape* FileShapes::find(const std::string& name) const {
  const SafetensorsEntry* e = f_.find(prefix_ + name);
  return e ? &e->shape : nullptr;
}

Result<Shape> FileShapes::need(const std::string& name, int rank) const {
  const Shape* s = find(name);
  if (!s)
    return make_error(ErrorCode::NOT_FOUND, "{}: {} tensor '{}{}' is missing", f_.path(), family_,
                      prefix_, name);
  if (s->rank != rank)
    return make_error(ErrorCode::CORRUPT, "{}: {} tensor '{}{}' has shape {}, expected rank {}",
                      f_.path(), family_, prefix_, name, s->str(), rank);
  return *s;
}

int FileShapes::count(const char* pattern) const {
  int n = 0;
  while (find(fmt::format(fmt::runtime(pattern), n))) ++n;
  return n;
}

}  // namespace hr
