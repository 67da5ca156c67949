// The residency clock and copy rate built from a measured device profile, and the fallback
// profiles where none was measured (Note [device profile] in residency_clock.cpp).
#pragma once

#include "graph/device_profile.h"
#include "graph/residency.h"

namespace hr {

// The share of the GEMM rate attention runs at (Note [device profile]).
inline constexpr double kAttentionShare = 0.3;

// The profile used when none was measured: an unknown GPU (the H200's figures) or the CPU.
DeviceProfile device_profile_default(bool memory_is_host);

// The residency clock and copy rate for a device (Note [device profile]); the other options
// keep their defaults.
ResidencyOptions residency_options_for(const DeviceProfile& profile);

}  // namespace hr
