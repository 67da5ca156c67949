// Byte counts as people write them: formatting ("1.25 GiB") and parsing sizes with units
// ("6GiB", "6144MiB", "512M", "1073741824").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hr {

// "512 B", "1.5 KiB", "12.3 MiB", "1.25 GiB"; UINT64_MAX is "unlimited".
std::string bytes_format(uint64_t bytes);

// A non-negative size: a number (may have a fraction) and an optional unit, case-insensitive:
// B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB. Units are binary (1 GB = 1 GiB = 2^30 bytes, as
// ComfyUI's and most GPU tools' "GB" mean); a bare number is bytes. INVALID_ARGUMENT names the
// text otherwise.
Result<uint64_t> bytes_parse(std::string_view text);

}  // namespace hr
