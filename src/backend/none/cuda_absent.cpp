// Built instead of backend/cuda/ when headroom is configured without CUDA.
#include "backend/backend.h"

namespace hr {

Result<std::unique_ptr<Backend>> cuda_backend_create(int) {
  return Status(ErrorCode::UNSUPPORTED,
                "this headroom was built without the CUDA backend (configure with "
                "-DHEADROOM_CUDA=ON on a machine with the CUDA toolkit)");
}

bool cuda_backend_built() { return false; }

}  // namespace hr
