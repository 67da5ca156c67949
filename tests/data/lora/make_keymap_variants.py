#!/usr/bin/env python3
"""ComfyUI's CLIP LoRA key maps of the SD text-encoder layouts the tiny checkpoints do not hold:
SD2 (OpenCLIP-H under "cond_stage_model.model.") and the SDXL refiner (bigG alone under
"conditioner.embedders.0.model."). Each is tiny-sdxl's bigG tower (its
"conditioner.embedders.1.model." tensors) moved to that prefix, converted by ComfyUI's own
SD20 / SDXLRefiner.process_clip_state_dict and mapped by comfy.lora.model_lora_keys_clip.
Writes keymap-tiny-sd2-clip.json and keymap-tiny-refiner-clip.json (the format of
make_lora_golden.py's key maps, plus "derived": how the test rebuilds the file).
Also unet-diffusers-names.json: comfy.utils.unet_to_diffusers on the full-size SD1.5, SDXL and
SDXL-refiner UNet configs, each as its config, the pair count and the FNV-1a 64 hash of the
sorted lines "<diffusers name> <ldm name>\n" (the full lists would be ~150 KB each).
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


FULL_SIZE_UNETS = {
    "sd15": {"num_res_blocks": [2, 2, 2, 2], "channel_mult": [1, 2, 4, 4],
             "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0], "transformer_depth_middle": 1,
             "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0]},
    "sdxl": {"num_res_blocks": [2, 2, 2], "channel_mult": [1, 2, 4],
             "transformer_depth": [0, 0, 2, 2, 10, 10], "transformer_depth_middle": 10,
             "transformer_depth_output": [0, 0, 0, 2, 2, 2, 10, 10, 10]},
    "sdxl_refiner": {"num_res_blocks": [2, 2, 2, 2], "channel_mult": [1, 2, 4, 4],
                     "transformer_depth": [0, 0, 4, 4, 4, 4, 0, 0], "transformer_depth_middle": 4,
                     "transformer_depth_output": [0, 0, 0, 4, 4, 4, 4, 4, 4, 0, 0, 0]},
}


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def write_unet_names(comfy):
    out = {}
    for name, config in FULL_SIZE_UNETS.items():
        pairs = comfy.utils.unet_to_diffusers(dict(config))
        text = "".join("{} {}\n".format(d, pairs[d]) for d in sorted(pairs))
        out[name] = {"config": config, "count": len(pairs),
                     "fnv1a64": "{:016x}".format(fnv1a64(text.encode()))}
    path = os.path.join(HERE, "unet-diffusers-names.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("{}: {}".format(os.path.basename(path), {k: v["count"] for k, v in out.items()}))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    comfy = mlg.import_comfy(os.path.abspath(sys.argv[1]))
    for name, (prefix, config) in VARIANTS.items():
        write(comfy, Variant(comfy, name, prefix, config), prefix)
    write_unet_names(comfy)


if __name__ == "__main__":
    main()
