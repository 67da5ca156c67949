// ComfyUI's per-family CLIP settings (comfy/sd1_clip.py, sd2_clip.py, sdxl_clip.py) as data the
// SD families declare, and the rule that turns CLIPSetLastLayer's value into an encoder's layer.
#pragma once

namespace hr {

// A family's defaults for its CLIP encoders.
struct SDClipDefaults {
  int layer;                 // CLIPSetLastLayer's 0 means this layer (-1 SD1, -2 SD2 / SDXL)
  bool final_norm;           // apply the final layer norm to a hidden layer's output
  bool pad_with_end_clip_l;  // pad CLIP-L rows with EOS (true) or 0
  bool pad_with_end_openclip;
};

struct EncoderSettings {
  int layer;
  bool final_norm;
  bool pad_with_end;  // pad with EOS (CLIP-L) or with 0 (OpenCLIP)
};

// `layer` is CLIPSetLastLayer's value (0: the family's default); `layers` the encoder's depth.
// ComfyUI sd1_clip.py set_clip_options: a layer beyond the encoder's depth means "last", the
// final output after the final layer norm.
inline EncoderSettings encoder_settings(const SDClipDefaults& d, bool clip_l, int layer,
                                        int layers) {
  EncoderSettings s{layer ? layer : d.layer, d.final_norm,
                    clip_l ? d.pad_with_end_clip_l : d.pad_with_end_openclip};
  if (-s.layer > layers) s = {-1, true, s.pad_with_end};
  return s;
}

}  // namespace hr
