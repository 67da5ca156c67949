// The backend and compute dtype a command asks for with --device and --dtype, chosen the same
// way by `headroom run`, `headroom bench` and `headroom serve`.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/status.h"

namespace hr {

// --device auto|cpu|cuda|cuda:N: auto takes the GPU when there is one; cuda is cuda:0.
Result<std::unique_ptr<Backend>> backend_open(const std::string& device, int threads);

// --dtype auto (compute_dtype_default(): f32 on the CPU, f16 on a GPU) or a name;
// INVALID_ARGUMENT for an unknown name, UNSUPPORTED when the backend cannot compute in it.
Result<DType> compute_dtype_pick(const std::string& name, const Backend& backend);

}  // namespace hr
