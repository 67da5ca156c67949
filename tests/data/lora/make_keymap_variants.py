#!/usr/bin/env python3
"""ComfyUI's CLIP LoRA key maps of the SD text-encoder layouts the tiny checkpoints do not hold:
SD2 (OpenCLIP-H under "cond_stage_model.model.") and the SDXL refiner (bigG alone under
"conditioner.embedders.0.model."). Each is tiny-sdxl's bigG tower (its
"conditioner.embedders.1.model." tensors) moved to that prefix, converted by ComfyUI's own
SD20 / SDXLRefiner.process_clip_state_dict and mapped by comfy.lora.model_lora_keys_clip.
Writes keymap-tiny-sd2-clip.json and keymap-tiny-refiner-clip.json (the format of
make_lora_golden.py's key maps, plus "derived": how the test rebuilds the file).
Usage: make_keymap_variants.py COMFYUI_DIR (ComfyUI a125cd84, as make_lora_golden.py).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_lora_golden as mlg  # ComfyUI import with stubs, safetensors reading, provenance

SOURCE = "golden/tiny-sdxl.safetensors"
BIGG = "conditioner.embedders.1.model."
VARIANTS = {
    # name: (new prefix, ComfyUI model config class)
    "tiny-sd2-clip": ("cond_stage_model.model.", "SD20"),
    "tiny-refiner-clip": ("conditioner.embedders.0.model.", "SDXLRefiner"),
}


class Variant(mlg.Checkpoint):
    """A text-encoder-only file: bigG's tensors under `prefix`, converted as `config` does."""

    def __init__(self, comfy, name, prefix, config):
        self.name = name
        full = mlg.read_safetensors(os.path.join(HERE, "..", SOURCE))
        self.original = {prefix + k[len(BIGG):]: v for k, v in full.items() if k.startswith(BIGG)}
        unet_config = {"in_channels": 4, "use_linear_in_transformer": True}
        self.model_config = getattr(comfy.supported_models, config)(unet_config)
        clip_sd = self.model_config.process_clip_state_dict(dict(self.original))
        self.clip = mlg.StandIn(clip_sd)
        self.provenance = self._trace(clip_sd)


def write(comfy, v, prefix):
    clip = comfy.lora.model_lora_keys_clip(v.clip, {})
    path = os.path.join(HERE, "keymap-{}.json".format(v.name))
    out = {"checkpoint": SOURCE, "derived": {"from": BIGG, "to": prefix}, "unet": {},
           "clip": {stem: v.target(clip[stem]) for stem in sorted(clip)}}
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")
    print("{}: {} clip stems".format(os.path.basename(path), len(clip)))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    comfy = mlg.import_comfy(os.path.abspath(sys.argv[1]))
    for name, (prefix, config) in VARIANTS.items():
        write(comfy, Variant(comfy, name, prefix, config), prefix)


if __name__ == "__main__":
    main()
