// SDXL adm vector.
#include "models/sd/sdxl_adm.h"

#include <cmath>
#include <cstring>

namespace hr {

Result<HostTensor> sdxl_adm_vector(const HostTensor& pooled, const std::vector<double>& values,
                                   int64_t adm, int64_t batch) {
  if (pooled.dtype() != DType::F32 || pooled.shape().rank != 2 || pooled.shape()[0] != 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "SDXL pooled output must be f32 [1, P], got {}",
                      pooled.desc().str());
  int64_t p = pooled.shape()[1], n = int64_t(values.size());
  if (n == 0 || adm <= p || (adm - p) % n != 0 || ((adm - p) / n) % 2 != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "adm width {} does not fit a pooled width {} and {} size embeddings", adm, p, n);
  int64_t w = (adm - p) / n, half = w / 2;
  HostTensor y(DType::F32, Shape{batch, adm});
  for (int64_t b = 0; b < batch; ++b) {
    float* row = y.f32() + b * adm;
    std::memcpy(row, pooled.f32(), size_t(p) * 4);
    for (int64_t k = 0; k < n; ++k) {
      float* o = row + p + k * w;
      for (int64_t i = 0; i < half; ++i) {
        // float32 arithmetic as the reference Timestep embedder computes it
        float f = std::exp(-std::log(10000.0f) * float(i) / float(half));
        float arg = float(values[size_t(k)]) * f;
        o[i] = std::cos(arg);
        o[half + i] = std::sin(arg);
      }
    }
  }
  return y;
}

}  // namespace hr
