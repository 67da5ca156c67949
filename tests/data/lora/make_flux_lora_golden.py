#!/usr/bin/env python3
"""ComfyUI's LoRA key map and LoRA patching of the tiny Flux DiT (tests/data/flux/dit_golden.safetensors,
its weights without the "golden." test tensors), with ComfyUI's own functions (a125cd84):
comfy.lora.model_lora_keys_unet on a stand-in comfy.model_base.Flux whose state_dict() is the
weights under "diffusion_model." and whose unet_config is make_dit_golden.py's CONFIG (the
flux_to_diffusers branch), comfy.lora_convert.convert_lora, comfy.lora.load_lora,
ModelPatcher.add_patches (make_lora_golden.add_patches) and comfy.lora.calculate_weight.

Writes (beside this file):
  keymap-tiny-flux.json          the key map, make_lora_golden.py's format ("unet" only); a target
                                 ComfyUI gives a function (swap_scale_shift) has "function": name
  flux_diffusers.safetensors     a diffusers/PEFT-format LoRA (to_q/to_k/to_v, add_k_proj,
                                 proj_mlp: row slices of the fused tensors) and OneTrainer stems
  flux_kohya.safetensors         kohya "lora_unet_" stems on fused tensors, ComfyUI's
                                 "diffusion_model.single_blocks.0.linear1_qkv", LyCORIS stems,
                                 one unmatched key
  flux_lora.golden.safetensors   the patched float32 tensors of each case under "<case>/<name>"
  flux_cases.json                per case: file, strength, patched tensors, not-loaded keys
  keymap-tiny-flux-e2e.json      the key map (DiT and text encoders: model_lora_keys_clip) of the
                                 single-file tiny Flux of tests/data/flux/e2e
Usage: make_flux_lora_golden.py COMFYUI_DIR (archive step in README.md).
"""
import json
import logging
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_lora_golden as mlg  # noqa: E402  ComfyUI import with stubs, safetensors, add_patches

CHECKPOINT = "flux/dit_golden.safetensors"
# make_dit_golden.py's CONFIG (the tiny Flux the checkpoint was made with)
CONFIG = dict(in_channels=16, out_channels=16, vec_in_dim=16, context_in_dim=24, hidden_size=32,
              mlp_ratio=4.0, num_heads=2, depth=2, depth_single_blocks=1, axes_dim=[4, 6, 6],
              theta=10000, patch_size=2, qkv_bias=True, guidance_embed=True)
H = CONFIG["hidden_size"]


def flux_standin(comfy, sd, config=CONFIG):
    """What model_lora_keys_unet reads of a Flux model: isinstance Flux, state_dict(),
    model_config.unet_config."""
    class FluxStandIn(comfy.model_base.Flux):
        def __init__(self):  # no module construction: only the two attributes below
            object.__setattr__(self, "_sd", sd)
            object.__setattr__(self, "model_config", types.SimpleNamespace(unet_config=dict(config)))

        def state_dict(self):
            return self._sd
    return FluxStandIn()


def target_json(t, sd, checkpoint_prefix=""):
    function = None
    if isinstance(t, str):
        key, offset = t, None
    else:
        key, offset = t[0], t[1]
        function = t[2].__name__ if len(t) > 2 else None
    out = {"comfy_key": key, "key": checkpoint_prefix + key if key in sd else None,
           "offset": None, "rows": None}
    if offset is not None:
        assert offset[0] == 0, t
        out["offset"], out["rows"] = offset[1], offset[2]
    if function:
        out["function"] = function
    return out


class Lora:
    def __init__(self, sd, seed):
        self.sd, self.rng, self.t = sd, np.random.RandomState(seed), {}

    def randn(self, *shape):
        return torch.from_numpy(self.rng.standard_normal(shape).astype(np.float32))

    def add(self, stem, rows, cols, rank, alpha=None, names=(".lora_up.weight", ".lora_down.weight")):
        up, down = self.randn(rows, rank) * 0.3, self.randn(rank, cols) * 0.3
        self.t[stem + names[0]] = up.half()
        self.t[stem + names[1]] = down.half()
        if alpha is not None:
            self.t[stem + ".alpha"] = torch.tensor(float(alpha)).half()


def case_diffusers(b):
    peft = (".lora_B.weight", ".lora_A.weight")
    for q in ("to_q", "to_k", "to_v"):  # all three thirds of double block 0's img_attn.qkv
        b.add("transformer.transformer_blocks.0.attn." + q, H, H, 4, names=peft)
    b.add("transformer.transformer_blocks.1.attn.add_k_proj", H, H, 2, alpha=1.0, names=peft)
    b.add("transformer.transformer_blocks.0.attn.to_out.0", H, H, 4, names=peft)
    b.add("transformer.transformer_blocks.1.ff_context.net.0.proj", 4 * H, H, 4, names=peft)
    b.add("transformer.single_transformer_blocks.0.attn.to_q", H, H, 4, alpha=2.0, names=peft)
    b.add("transformer.single_transformer_blocks.0.proj_mlp", 4 * H, H, 4, names=peft)
    b.add("transformer.single_transformer_blocks.0.proj_out", H, 5 * H, 4, names=peft)
    b.add("transformer.x_embedder", H, 4 * CONFIG["in_channels"], 2, names=peft)
    b.add("lora_transformer_single_transformer_blocks_0_attn_to_v", H, H, 2, alpha=1.5)


def case_kohya(b):
    b.add("lora_unet_double_blocks_0_img_attn_qkv", 3 * H, H, 4, alpha=2.0)
    b.add("lora_unet_double_blocks_1_txt_mlp_0", 4 * H, H, 4, alpha=4.0)
    b.add("lora_unet_single_blocks_0_linear1", 7 * H, H, 4, alpha=3.0)
    b.add("diffusion_model.single_blocks.0.linear1_qkv", 3 * H, H, 2)
    b.add("lycoris_transformer_blocks_1_attn_to_k", H, H, 2, alpha=1.0)
    b.add("lora_unet_final_layer_linear", 4 * CONFIG["out_channels"], H, 2)
    b.add("lora_unet_not_a_block", 8, 8, 2)  # unmatched


CASES = {"flux_diffusers": (case_diffusers, 11, 0.75), "flux_kohya": (case_kohya, 12, 1.25)}


def load_checkpoint(path):
    """The checkpoint's weights under ComfyUI's model keys, without its "golden." test tensors."""
    full = mlg.read_safetensors(os.path.join(HERE, "..", path))
    return {"diffusion_model." + k: v for k, v in full.items() if not k.startswith("golden.")}


def strip(target):
    """A target of the bare DiT file: the checkpoint key is ComfyUI's without "diffusion_model."."""
    if target["key"] is not None:
        target["key"] = target["key"][len("diffusion_model."):]
    return target


E2E_CHECKPOINT = "flux/e2e/tiny-flux.safetensors"
# its dit_config metadata, in flux_to_diffusers' terms
E2E_CONFIG = {"hidden_size": 16, "depth": 1, "depth_single_blocks": 1}


def write_e2e_keymap(comfy):
    """keymap-tiny-flux-e2e.json: load_lora_for_models' key map (model_lora_keys_unet, then
    model_lora_keys_clip into the same dict) of the single-file tiny Flux, its DiT under
    "model.diffusion_model." and CLIP-L / T5 under "text_encoders." as ComfyUI converts them
    (BASE.process_clip_state_dict strips "text_encoders."). "key" is the checkpoint's name."""
    full = mlg.read_safetensors(os.path.join(HERE, "..", E2E_CHECKPOINT))
    dit = "model.diffusion_model."
    unet_sd = {"diffusion_model." + k[len(dit):]: v for k, v in full.items() if k.startswith(dit)}
    clip_sd = {k[len("text_encoders."):]: v for k, v in full.items() if k.startswith("text_encoders.")}
    key_map = comfy.lora.model_lora_keys_unet(flux_standin(comfy, unet_sd, E2E_CONFIG), {})
    key_map = comfy.lora.model_lora_keys_clip(mlg.StandIn(clip_sd), key_map)
    out = {"checkpoint": E2E_CHECKPOINT, "unet": {}, "clip": {}}
    for stem in sorted(key_map):
        t = key_map[stem]
        key = t if isinstance(t, str) else t[0]
        if key.startswith("diffusion_model."):
            out["unet"][stem] = target_json(t, unet_sd, "model.")
        else:
            out["clip"][stem] = target_json(t, clip_sd, "text_encoders.")
    with open(os.path.join(HERE, "keymap-tiny-flux-e2e.json"), "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")
    print("keymap-tiny-flux-e2e.json: {} unet, {} clip stems".format(len(out["unet"]), len(out["clip"])))


def write_goldens(comfy, family, checkpoint, sd, key_map, cases):
    """keymap-tiny-<family>.json, the cases' LoRA files, <family>_lora.golden.safetensors and
    <family>_cases.json from ComfyUI's load_lora / add_patches / calculate_weight."""
    with open(os.path.join(HERE, "keymap-tiny-{}.json".format(family)), "w") as f:
        json.dump({"checkpoint": checkpoint,
                   "unet": {s: strip(target_json(key_map[s], sd)) for s in sorted(key_map)},
                   "clip": {}}, f, indent=0, sort_keys=True)
        f.write("\n")
    print("keymap-tiny-{}.json: {} stems".format(family, len(key_map)))
    golden, out = {}, {}
    for name, (fill, seed, strength) in cases.items():
        b = Lora(sd, seed)
        fill(b)
        mlg.write_safetensors(os.path.join(HERE, name + ".safetensors"), b.t)
        capture = mlg.LogCapture()
        logging.getLogger().addHandler(capture)
        try:
            loaded = comfy.lora.load_lora(comfy.lora_convert.convert_lora(dict(b.t)), key_map)
        finally:
            logging.getLogger().removeHandler(capture)
        prefix = "lora key not loaded: "
        not_loaded = sorted(m[len(prefix):] for m in capture.messages if m.startswith(prefix))
        patches = {}
        added = mlg.add_patches(sd, loaded, strength, patches)
        if len(added) != len(loaded):
            raise SystemExit("{}: NOT LOADED {}".format(name, [k for k in loaded if k not in added]))
        patched = []
        for key in sorted(patches):
            capture = mlg.LogCapture()
            logging.getLogger().addHandler(capture)
            try:
                result = comfy.lora.calculate_weight(patches[key], sd[key].to(torch.float32, copy=True), key)
            finally:
                logging.getLogger().removeHandler(capture)
            if capture.messages:
                raise SystemExit("calculate_weight on {}: {}".format(key, capture.messages))
            if not (result - sd[key]).abs().max() > 1e-3 * sd[key].abs().max():
                raise SystemExit("{}: {} unchanged".format(name, key))
            name_in_file = key[len("diffusion_model."):]
            golden["{}/{}".format(name, name_in_file)] = result.contiguous()
            patched.append(name_in_file)
        out[name] = {"file": name + ".safetensors", "strength_model": strength,
                     "patched": patched, "not_loaded": not_loaded,
                     "patch_count": {k[len("diffusion_model."):]: len(v) for k, v in sorted(patches.items())}}
        print("{}: {} tensors patched, not loaded {}".format(name, len(patched), not_loaded))
    mlg.write_safetensors(os.path.join(HERE, "{}_lora.golden.safetensors".format(family)), golden)
    with open(os.path.join(HERE, "{}_cases.json".format(family)), "w") as f:
        json.dump({"checkpoint": checkpoint, "cases": out}, f, indent=1, sort_keys=True)
        f.write("\n")


def import_comfy(comfy_dir):
    mlg.STUBBED_ROOTS.add("PIL")  # comfy.utils imports PIL.Image; nothing used here calls it
    comfy = mlg.import_comfy(os.path.abspath(comfy_dir))
    import comfy.model_base  # noqa: F401
    return comfy


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    comfy = import_comfy(sys.argv[1])
    sd = load_checkpoint(CHECKPOINT)
    key_map = comfy.lora.model_lora_keys_unet(flux_standin(comfy, sd), {})
    write_goldens(comfy, "flux", CHECKPOINT, sd, key_map, CASES)
    write_e2e_keymap(comfy)


if __name__ == "__main__":
    main()
