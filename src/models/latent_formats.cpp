// Latent format data from comfy/latent_formats.py (ComfyUI a125cd84).
#include "models/latent_formats.h"

namespace hr {

LatentFormat latent_format_flux() {
  LatentFormat f;
  f.channels = 16;
  f.scale_factor = 0.3611f;
  f.shift_factor = 0.1159f;
  f.rgb_factors = {{-0.0346f, 0.0244f, 0.0681f},  {0.0034f, 0.0210f, 0.0687f},
                   {0.0275f, -0.0668f, -0.0433f}, {-0.0174f, 0.0160f, 0.0617f},
                   {0.0859f, 0.0721f, 0.0329f},   {0.0004f, 0.0383f, 0.0115f},
                   {0.0405f, 0.0861f, 0.0915f},   {-0.0236f, -0.0185f, -0.0259f},
                   {-0.0245f, 0.0250f, 0.1180f},  {0.1008f, 0.0755f, -0.0421f},
                   {-0.0515f, 0.0201f, 0.0011f},  {0.0428f, -0.0012f, -0.0036f},
                   {0.0817f, 0.0765f, 0.0749f},   {-0.1264f, -0.0522f, -0.1103f},
                   {-0.0280f, -0.0881f, -0.0499f}, {-0.1262f, -0.0982f, -0.0778f}};
  f.rgb_bias = {-0.0329f, -0.0718f, -0.0851f};
  return f;
}

}  // namespace hr
