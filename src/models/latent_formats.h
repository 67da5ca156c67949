// The latent formats of the families headroom knows beyond SD's own (comfy/latent_formats.py),
// as LatentFormat data (models/family.h) for a family to declare.
#pragma once

#include "models/family.h"

namespace hr {

// comfy/latent_formats.py Flux: 16 channels, scale_factor 0.3611, shift_factor 0.1159, its
// latent2rgb factors and bias (Note [latent2rgb factors], Note [latent format shift]).
LatentFormat latent_format_flux();

}  // namespace hr
