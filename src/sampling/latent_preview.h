// Sampler previews: the denoised estimate of a step turned into a small picture without the
// VAE (ComfyUI's latent2rgb previewer), for the server's binary preview frames.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"
#include "models/family.h"
#include "core/png_io.h"

namespace hr {

// ComfyUI's --preview-method values headroom implements: none, or latent2rgb (auto picks
// latent2rgb, since headroom ships no TAESD decoder).
enum class PreviewMethod { NONE, LATENT2RGB };
Result<PreviewMethod> preview_method_parse(std::string_view name);

// The first batch entry of a model-space latent [B, C, H, W] (f32) as an RGB image of H x W,
// through the latent format's linear latent-to-RGB factors (C = format.channels).
Result<Image8> latent_preview(const HostTensor& latent, const LatentFormat& format);

}  // namespace hr
