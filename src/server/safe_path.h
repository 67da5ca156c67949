// Paths from clients (/view, /upload/image) confined to their folder: no absolute paths, no
// '..' components, and no symlink that leads out of the folder.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"

namespace hr {

// `root`/`subfolder`/`filename`, resolved. INVALID_ARGUMENT when filename is empty, either part
// is absolute or has a '..' component or a NUL byte, or the path resolved through symlinks
// (Note [confined paths]) is not inside `root` resolved the same way.
Result<std::filesystem::path> path_confined(const std::string& root, const std::string& subfolder,
                                            const std::string& filename);

}  // namespace hr
