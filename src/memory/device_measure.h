// Measuring a device profile (graph/device_profile.h) on a backend, through the Backend
// interface only: a GEMM, a device copy, a tiny op and a copy from page-locked host memory.
#pragma once

#include "backend/backend.h"
#include "core/status.h"
#include "graph/device_profile.h"

namespace hr {

// Note [profile probes]: each probe is grown from a small size until one repetition takes long
// enough to time, then timed a few times on the default stream with timing events; the median
// counts. The whole measurement takes well under a second (plus first-call setup such as
// cuBLAS handles). UNSUPPORTED for a backend without timing events; a failed allocation or op
// is returned as it came.
Result<DeviceProfile> device_profile_measure(Backend& backend);

}  // namespace hr
