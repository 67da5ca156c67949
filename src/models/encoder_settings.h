// ComfyUI's per-family text-encoder settings (comfy/sd1_clip.py, sd2_clip.py, sdxl_clip.py),
// which CLIPTextEncode and the SDXL encoders apply.
#pragma once

#include "models/checkpoint.h"

namespace hr {

struct EncoderSettings {
  int layer;
  bool final_norm;
  bool pad_with_end;  // pad with EOS (CLIP-L) or with 0 (OpenCLIP)
};

// `layer` is CLIPSetLastLayer's value (0: the family's default); `layers` the encoder's depth.
// ComfyUI sd1_clip.py set_clip_options: a layer beyond the encoder's depth means "last", the
// final output after the final layer norm.
inline EncoderSettings encoder_settings(ModelFamily family, TextEncoderKind kind, int layer,
                                        int layers) {
  EncoderSettings s;
  switch (family) {
    case ModelFamily::SDXL: s = {layer ? layer : -2, false, kind == TextEncoderKind::CLIP_L}; break;
    case ModelFamily::SD2: s = {layer ? layer : -2, true, false}; break;
    default: s = {layer ? layer : -1, true, true}; break;
  }
  if (-s.layer > layers) s = {-1, true, s.pad_with_end};
  return s;
}

}  // namespace hr
