// path_confine: lexical checks, then the same check on the canonical (symlink-free) paths; the
// client and node entry points built on it.
#include "core/path_confine.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

Status relative_check(const std::string& part, const char* what) {
  if (part.find('\0') != std::string::npos)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} contains a NUL byte", what);
  const fs::path p(part);
  if (p.is_absolute() || p.has_root_name() ||
      (!part.empty() && (part[0] == '/' || part[0] == '\\')))
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} '{}' is an absolute path", what, part);
  const fs::path normal = p.lexically_normal();
  if (!normal.empty() && *normal.begin() == "..")
    return make_error(ErrorCode::INVALID_ARGUMENT, "{} '{}' leaves its folder", what, part);
  return Status();
}

Result<fs::path> root_resolve(const std::string& root) {
  std::error_code ec;
  fs::path root_c = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) return make_error(ErrorCode::IO, "folder {}: {}", root, ec.message());
  return root_c;
}

// `p` is `root` or below it (both canonical).
bool inside(const fs::path& root, const fs::path& p) {
  const fs::path rel = p.lexically_relative(root);
  return !rel.empty() && *rel.begin() != ".." && !rel.is_absolute();
}

}  // namespace

// Note [confined paths]: weakly_canonical resolves every symlink along the existing part of the
// path (and '..' after a symlink from the link's target, as the kernel does), so a folder or
// file that links outside the root resolves outside it and is refused, while links that stay
// inside are allowed. The lexical checks come first so that nothing outside is even looked at.
// Writers create folders only after the check and then check again (output_target_make,
// /upload's upload_target), so a folder swapped for a link in between is caught as well.
Result<fs::path> path_confine(const std::string& root, const std::string& relative) {
  HR_TRY(relative_check(relative, "path"));
  HR_ASSIGN_OR_RETURN(const fs::path root_c, root_resolve(root));
  std::error_code ec;
  fs::path p = fs::weakly_canonical(root_c / relative, ec);
  if (ec) return make_error(ErrorCode::IO, "{}: {}", relative, ec.message());
  if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();  // "dir/" as "dir"
  if (!inside(root_c, p))
    return make_error(ErrorCode::INVALID_ARGUMENT, "'{}' resolves outside its folder", relative);
  return p;
}

Result<fs::path> path_confined(const std::string& root, const std::string& subfolder,
                               const std::string& filename) {
  if (filename.empty()) return make_error(ErrorCode::INVALID_ARGUMENT, "no filename");
  HR_TRY(relative_check(subfolder, "subfolder"));
  HR_TRY(relative_check(filename, "filename"));
  Result<fs::path> p = path_confine(root, (fs::path(subfolder) / filename).string());
  if (!p.ok() && p.status().code() == ErrorCode::INVALID_ARGUMENT)
    return make_error(ErrorCode::INVALID_ARGUMENT, "'{}' resolves outside its folder", filename);
  return p;
}

namespace {

// ComfyUI splits os.path.normpath(prefix) into its folder and its last component.
std::pair<std::string, std::string> prefix_split(const std::string& prefix) {
  fs::path normal = fs::path(prefix).lexically_normal();
  if (!normal.has_filename() && normal.has_parent_path()) normal = normal.parent_path();
  return {normal.parent_path().string(), normal.filename().string()};
}

Result<OutputTarget> output_target_resolve(const std::string& root, const std::string& prefix) {
  HR_TRY(relative_check(prefix, "filename_prefix"));
  auto [folder, base] = prefix_split(prefix);
  Result<fs::path> resolved = path_confine(root, folder);
  if (!resolved.ok() && resolved.status().code() == ErrorCode::INVALID_ARGUMENT)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "filename_prefix '{}' leads outside its folder through a symlink", prefix);
  if (!resolved.ok()) return resolved.status();
  HR_ASSIGN_OR_RETURN(const fs::path root_c, root_resolve(root));
  const fs::path sub = resolved->lexically_relative(root_c);
  return OutputTarget{*resolved, base, sub == "." ? std::string() : sub.generic_string()};
}

// ComfyUI's text, then why (which names the prefix).
Status outside_error(const Status& why) {
  return make_error(ErrorCode::INVALID_ARGUMENT, "{} {}", kOutsideOutputFolder, why.message());
}

// output_target_resolve with a refusal in ComfyUI's words.
Result<OutputTarget> output_target_checked(const std::string& root, const std::string& prefix) {
  Result<OutputTarget> t = output_target_resolve(root, prefix);
  if (!t.ok() && t.status().code() == ErrorCode::INVALID_ARGUMENT) return outside_error(t.status());
  return t;
}

}  // namespace

Status output_target_check(const std::string& root, const std::string& prefix) {
  return output_target_checked(root, prefix).status();
}

Result<OutputTarget> output_target_make(const std::string& root, const std::string& prefix) {
  Result<OutputTarget> t = output_target_checked(root, prefix);
  if (!t.ok()) return t;
  std::error_code ec;
  fs::create_directories(t->folder, ec);
  if (ec)
    return make_error(ErrorCode::IO, "cannot create output folder {}: {}", t->folder.string(),
                      ec.message());
  Result<OutputTarget> again = output_target_resolve(root, prefix);  // Note [confined paths]
  if (!again.ok() || again->folder != t->folder)
    return outside_error(make_error(ErrorCode::INVALID_ARGUMENT,
                                    "filename_prefix '{}': its folder became a link", prefix));
  return t;
}

}  // namespace hr
