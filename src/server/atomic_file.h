// Whole-file reads and atomic writes (a temporary name in the same folder, then rename), so a
// reader or a crash never sees half a file.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"

namespace hr {

Status file_write_atomic(const std::filesystem::path& path, const std::string& data);
Result<std::string> file_read(const std::filesystem::path& path);

}  // namespace hr
