// fp8_patched_host: ComfyUI's patch of an fp8 weight, on the host.
#include "memory/fp8_patch.h"

#include <vector>

#include "core/fp8_round.h"

namespace hr {

// Note [fp8 patches]
// ComfyUI patches a weight stored in fp8 (comfy/model_patcher.py patch_weight_to_device) in
// float32: the stored value cast to float32, times its scale when the file is scaled fp8
// (ops.py convert_weight), the patches added as calculate_weight adds them, divided by the scale
// again (ops.py set_weight), and rounded back to the fp8 dtype by float.py's stochastic_rounding
// seeded with string_to_seed(<ComfyUI key>). headroom does the same on the host with the host
// reference of the patches and core/fp8_round.h's rounding (bit-identical with ComfyUI's on the
// CPU); the float32 sums can differ from torch's in the last bit, which moves a rounding now and
// then. DoRA's multiplier is taken from the float32 weight before the patches.
Result<HostTensor> fp8_patched_host(const HostTensor& stored, const HostTensor* scale,
                                    std::span<const WeightPatch> patches,
                                    const std::string& comfy_key) {
  const DType dt = stored.dtype();
  if (!dtype_is_fp8(dt))
    return make_error(ErrorCode::INTERNAL, "'{}' is not an fp8 weight", comfy_key);
  bool placeholders = stored.is_placeholder() || (scale && scale->is_placeholder());
  for (const WeightPatch& p : patches)
    for (const HostTensor& f : p.factors) placeholders = placeholders || f.is_placeholder();
  if (placeholders) return HostTensor::placeholder(stored.desc());  // a plan run (Note [plan run])
  HostTensor w = stored.to(DType::F32);
  const float s = scale ? scale->f32()[0] : 1.0f;
  if (scale)
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] *= s;
  std::vector<HostTensor> multipliers;
  for (size_t i = 0; i < patches.size(); ++i) {
    if (patches[i].dora_scale.empty()) {
      multipliers.emplace_back();
      continue;
    }
    HR_ASSIGN_OR_RETURN(HostTensor m, dora_multiplier(w, patches, i));
    multipliers.push_back(std::move(m));
  }
  HR_TRY(patches_apply_host(w, patches, multipliers));
  if (scale)
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] /= s;
  HostTensor out(dt, stored.shape());
  const int64_t rows = stored.shape().rank > 0 ? stored.shape()[0] : 1;
  fp8_stochastic_round(w.f32(), rows, rows > 0 ? w.numel() / rows : 0, dt,
                       comfy_string_seed(comfy_key), static_cast<uint8_t*>(out.data()));
  return out;
}

}  // namespace hr
