// path_confined: lexical checks, then the same check on the canonical (symlink-free) paths.
#include "server/safe_path.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

Status part_check(const std::string& part, const char* what) {
  if (part.find('\0') != std::string::npos)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} contains a NUL byte", what);
  const fs::path p(part);
  if (p.is_absolute() || p.has_root_name() ||
      (!part.empty() && (part[0] == '/' || part[0] == '\\')))
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} '{}' is an absolute path", what, part);
  for (const fs::path& c : p)
    if (c == "..")
      return make_error(ErrorCode::INVALID_ARGUMENT, "{} '{}' leaves its folder", what, part);
  return Status();
}

bool inside(const fs::path& root, const fs::path& p) {
  const fs::path rel = p.lexically_relative(root);
  return !rel.empty() && *rel.begin() != ".." && !rel.is_absolute();
}

}  // namespace

// Note [confined paths]: weakly_canonical resolves every symlink along the existing part of the
// path, so a subfolder (or file) that links outside the folder resolves outside it and is
// refused, while links that stay inside are allowed. The lexical checks come first so that
// nothing outside is even looked at.
Result<fs::path> path_confined(const std::string& root, const std::string& subfolder,
                               const std::string& filename) {
  if (filename.empty()) return make_error(ErrorCode::INVALID_ARGUMENT, "no filename");
  HR_TRY(part_check(subfolder, "subfolder"));
  HR_TRY(part_check(filename, "filename"));
  std::error_code ec;
  const fs::path root_c = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) return make_error(ErrorCode::IO, "folder {}: {}", root, ec.message());
  const fs::path p = fs::weakly_canonical(root_c / subfolder / filename, ec);
  if (ec) return make_error(ErrorCode::IO, "{}: {}", filename, ec.message());
  if (!inside(root_c, p))
    return make_error(ErrorCode::INVALID_ARGUMENT, "'{}' resolves outside its folder", filename);
  return p;
}

}  // namespace hr
