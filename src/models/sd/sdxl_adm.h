// SDXL's UNet conditioning vector y (ComfyUI SDXL.encode_adm / SDXLRefiner.encode_adm): the
// pooled bigG embedding followed by sinusoidal embeddings of the size (and crop, target size
// or aesthetic score) values.
#pragma once

#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// pooled [1, P] (f32); values: base = {height, width, crop_h, crop_w, target_height,
// target_width}, refiner = {height, width, crop_h, crop_w, aesthetic_score}. Each value v is
// embedded as [cos(v f_i), sin(v f_i)], f_i = exp(-ln(10000) i / half), with width
// (adm - P) / values.size(). Returns [batch, adm].
Result<HostTensor> sdxl_adm_vector(const HostTensor& pooled, const std::vector<double>& values,
                                   int64_t adm, int64_t batch);

}  // namespace hr
