// The diffusers names of the LDM UNet's tensors (the facts of ComfyUI's unet_to_diffusers):
// which "down_blocks.1.attentions.0.proj_in.weight" is which "input_blocks.4.1.proj_in.weight".
#pragma once

#include <string>
#include <vector>

#include "models/sd/unet.h"

namespace hr {

struct UNetNamePair {
  std::string diffusers;  // "down_blocks.0.resnets.1.conv1.weight"
  std::string ldm;        // "input_blocks.2.0.in_layers.2.weight" (no "diffusion_model." prefix)
};

// Every pair the configuration's block layout implies, weights and biases, in ComfyUI's order of
// blocks. Like the reference it names tensors a given UNet may lack (a skip connection where the
// channels do not change, the last level's upsampler, SD1's label embedding): callers keep the
// pairs whose LDM tensor the model has. Two diffusers names may share one LDM name (SDXL's
// label embedding is both "class_embedding" and "add_embedding").
std::vector<UNetNamePair> unet_diffusers_names(const UNetConfig& cfg);

}  // namespace hr
