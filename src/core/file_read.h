// Whole-file reads: a file's bytes as a string, or an error naming the path.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"

namespace hr {

// NOT_FOUND when the file cannot be opened, IO when reading it fails.
Result<std::string> file_read(const std::filesystem::path& path);

}  // namespace hr
