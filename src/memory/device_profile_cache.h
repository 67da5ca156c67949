// The device profile cache: one JSON file per device, read at start, measured and written when
// absent or unreadable (Note [device profile cache] in device_profile_cache.cpp).
#pragma once

#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/device_profile.h"

namespace hr {

// $XDG_CACHE_HOME/headroom/device-profile-<device>.json (~/.cache when XDG_CACHE_HOME is unset
// or empty), the device name lower-cased with every run of other characters than letters and
// digits made one '-' ("NVIDIA GeForce RTX 3060" -> "nvidia-geforce-rtx-3060"); "" when
// neither XDG_CACHE_HOME nor HOME is set.
std::string device_profile_path(const std::string& device);

// A profile written by device_profile_write. NOT_FOUND when the file is absent, CORRUPT when it
// is not a valid profile.
Result<DeviceProfile> device_profile_read(const std::string& path);
// Writes `profile` to `path` (its folder created), replacing the file in one rename.
Status device_profile_write(const std::string& path, const DeviceProfile& profile);

// The profile cached at `path` when it is one of backend's device, else measured on backend
// and written there (a corrupt file is replaced, with a warning on stderr); the fallback
// (device_profile_default) with a warning when it cannot be measured. An empty path measures
// without caching.
DeviceProfile device_profile_cached(Backend& backend, const std::string& path);

// The profile an Executor on `backend` plans with (Executor::set_device_profile): for a GPU
// device_profile_cached at device_profile_path; where device memory is host memory the CPU's
// fallback (Note [device profile cache]; Note [device properties] in backend/device.h).
DeviceProfile device_profile_load(Backend& backend);

}  // namespace hr
