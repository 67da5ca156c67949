// Names of the autoencoder's run modes.
#include "models/autoencoder.h"

namespace hr {

const char* vae_mode_name(VAEMode m) {
  switch (m) {
    case VAEMode::WHOLE: return "whole";
    case VAEMode::PER_IMAGE: return "per image";
    case VAEMode::TILED: return "tiled";
  }
  return "?";
}

}  // namespace hr
