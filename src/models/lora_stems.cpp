// Shared pieces of the families' LoRA key maps (lora_stems.h).
#include "models/lora_stems.h"

#include <string_view>
#include <utility>

namespace hr {

std::string lora_underscored(std::string dotted) {
  for (char& c : dotted)
    if (c == '.') c = '_';
  return dotted;
}

LoraTarget lora_diffusion_target(std::string weight, int64_t row_offset, int64_t rows) {
  return LoraTarget{LoraComponent::DIFFUSION, 0, std::move(weight), row_offset, rows};
}

void lora_generic_diffusion_keys(LoraKeyMap& map, const WeightSet& store) {
  constexpr std::string_view kWeight = ".weight";
  for (const std::string& name : store.names()) {
    if (name.ends_with(kWeight)) {
      const std::string module = name.substr(0, name.size() - kWeight.size());
      map["lora_unet_" + lora_underscored(module)] = lora_diffusion_target(name);
      map["diffusion_model." + module] = lora_diffusion_target(name);
    } else {
      map["diffusion_model." + name] = lora_diffusion_target(name);
    }
  }
}

}  // namespace hr
