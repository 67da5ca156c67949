// Image/latent resampling on NCHW float32 tensors with PyTorch's F.interpolate rules
// (align_corners=False), ComfyUI's bislerp and lanczos (PIL), and ComfyUI's common_upscale
// (center crop to the target aspect first).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Every method resample() takes: "nearest-exact", "bilinear", "area", "bicubic", "bislerp",
// "lanczos".
const std::vector<std::string>& resample_methods();
// The upscale_method options ComfyUI offers: LatentUpscale(By) adds bislerp to the four
// F.interpolate modes, ImageScale adds lanczos (comfy.utils.lanczos works on uint8 RGB).
const std::vector<std::string>& latent_upscale_methods();
const std::vector<std::string>& image_upscale_methods();

Result<HostTensor> resample(const HostTensor& x, int64_t out_h, int64_t out_w,
                            const std::string& method);

// ComfyUI common_upscale: crop "center" trims the source to the target aspect ratio first,
// "disabled" does not.
Result<HostTensor> common_upscale(const HostTensor& x, int64_t out_w, int64_t out_h,
                                  const std::string& method, const std::string& crop);

// [B, H, W, C] <-> [B, C, H, W].
HostTensor nhwc_to_nchw(const HostTensor& x);
HostTensor nchw_to_nhwc(const HostTensor& x);

}  // namespace hr
