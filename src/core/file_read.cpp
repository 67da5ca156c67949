// Whole-file reads (file_read.h).
#include "core/file_read.h"

#include <fstream>
#include <sstream>

namespace hr {

Result<std::string> file_read(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::NOT_FOUND, "cannot open '{}'", path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return make_error(ErrorCode::IO, "error reading '{}'", path.string());
  return ss.str();
}

}  // namespace hr
