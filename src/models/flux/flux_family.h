// The Flux.1 families (dev, schnell): their registry entries.
#pragma once

#include <vector>

#include "models/family.h"

namespace hr {

// flux (dev, guidance-distilled) then flux-schnell (Note [flux variants] in flux_family.cpp).
const std::vector<const ModelFamily*>& flux_families();

}  // namespace hr
