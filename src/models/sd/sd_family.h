// The Stable Diffusion families (SD1.x, SD2.x, SDXL and its refiner): their registry entries.
#pragma once

#include <vector>

#include "models/family.h"

namespace hr {

// sdxl, sd2, sd1 in detection order (Note [sd detection] in sd_family.cpp).
const std::vector<const ModelFamily*>& sd_families();

}  // namespace hr
