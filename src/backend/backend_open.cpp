#include "backend/backend_open.h"

#include <optional>

namespace hr {

Result<std::unique_ptr<Backend>> backend_open(const std::string& device, int threads) {
  if (device.rfind("cuda:", 0) == 0) {  // one GPU of several (`headroom worker --device cuda:1`)
    const std::string n = device.substr(5);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
      return make_error(ErrorCode::INVALID_ARGUMENT, "--device {}: expected cuda:N", device);
    Result<std::unique_ptr<Backend>> cuda = cuda_backend_create(std::stoi(n));
    if (!cuda.ok()) return cuda.status().with_context("--device " + device);
    return cuda;
  }
  if (device == "cuda" || device == "auto") {
    Result<std::unique_ptr<Backend>> cuda = cuda_backend_create(0);
    if (cuda.ok()) return cuda;
    if (device == "cuda") return cuda.status().with_context("--device cuda");
  }
  return cpu_backend_create(threads);
}

Result<DType> compute_dtype_pick(const std::string& name, const Backend& backend) {
  DType dtype = backend.compute_dtype_default();  // Note [device properties]
  if (name != "auto") {
    std::optional<DType> d = dtype_from_name(name);
    if (!d) return make_error(ErrorCode::INVALID_ARGUMENT, "unknown --dtype {}", name);
    dtype = *d;
  }
  if (!backend.op_supported(OpKind::CONV2D, dtype))
    return make_error(ErrorCode::UNSUPPORTED, "device {} does not compute in {}; use --dtype f32",
                      backend.info().name, dtype_name(dtype));
  return dtype;
}

}  // namespace hr
