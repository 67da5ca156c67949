// Atomic writes (a temporary name in the same folder, then rename), so a reader or a crash never
// sees half a file; whole-file reads are core/file_read.h's.
#pragma once

#include <filesystem>
#include <string>

#include "core/file_read.h"
#include "core/status.h"

namespace hr {

Status file_write_atomic(const std::filesystem::path& path, const std::string& data);

}  // namespace hr
