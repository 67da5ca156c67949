// A DiT's output cut back to its input latent's size after pad_to_patch_size padded it.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hr {

// The rows [0, h) x [0, w) of an f32 [B, C, hp, wp] tensor (x itself when already h x w).
HostTensor latent_crop(HostTensor x, int64_t h, int64_t w);

}  // namespace hr
