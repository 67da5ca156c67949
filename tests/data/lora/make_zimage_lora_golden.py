#!/usr/bin/env python3
"""ComfyUI's LoRA key map and LoRA patching of the tiny Z-Image DiT
(tests/data/zimage/dit_golden.safetensors without its "golden." tensors; n_layers 2, refiners 1,
dim 32). Same outputs and format as make_flux_lora_golden.py (keymap-tiny-zimage.json,
zimage_*.safetensors, zimage_lora.golden.safetensors, zimage_cases.json).

The mirror's ComfyUI (a125cd84) predates Z-Image: its model_lora_keys_unet gives the generic
stems (every model's "diffusion_model.X" / "lora_unet_X"), run here on a stand-in
comfy.model_base.Lumina2. The Z-Image stems come from newer ComfyUI, which is not at hand: its
comfy/lora.py Lumina2 branch and comfy/utils.py z_image_to_diffusers are RESTATED below
(lumina2_branch, z_image_diffusers_names) from public copies of that code, so this part of the
key map is a restatement of ComfyUI, not ComfyUI run. load_lora, add_patches and
calculate_weight are a125cd84's (plain LoRA math, unchanged since).
Usage: make_zimage_lora_golden.py COMFYUI_DIR (archive step in README.md).
"""
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_flux_lora_golden as mf  # noqa: E402

CHECKPOINT = "zimage/dit_golden.safetensors"
# the checkpoint's metadata config in ComfyUI's unet_config names
UNET_CONFIG = {"dim": 32, "n_layers": 2, "n_refiner_layers": 1}
D = UNET_CONFIG["dim"]
FFN = 85  # int(dim / 3 * 8)


def z_image_diffusers_names(config, prefix):
    """z_image_to_diffusers(config, output_prefix=prefix): diffusers name -> model key, or
    (model key, (dim, offset, size)) for q/k/v; restated from newer ComfyUI's comfy/utils.py."""
    dim = config.get("dim", 0)
    refiners = config.get("n_refiner_layers", 2)
    out = {}

    def block(src, dst):
        for end in ("weight", "bias"):
            for i, p in enumerate(("to_q", "to_k", "to_v")):
                out["{}.attention.{}.{}".format(src, p, end)] = (
                    "{}.attention.qkv.{}".format(dst, end), (0, i * dim, dim))
        same = ["attention_norm1.weight", "attention_norm2.weight", "feed_forward.w1.weight",
                "feed_forward.w2.weight", "feed_forward.w3.weight", "ffn_norm1.weight",
                "ffn_norm2.weight", "adaLN_modulation.0.weight", "adaLN_modulation.0.bias"]
        renamed = {"attention.norm_q.weight": "attention.q_norm.weight",
                   "attention.norm_k.weight": "attention.k_norm.weight",
                   "attention.to_out.0.weight": "attention.out.weight",
                   "attention.to_out.0.bias": "attention.out.bias"}
        renamed.update({n: n for n in same})
        for a, b in renamed.items():
            out["{}.{}".format(src, a)] = "{}.{}".format(dst, b)

    for i in range(config.get("n_layers", 0)):
        block("layers.{}".format(i), "{}layers.{}".format(prefix, i))
    for stack in ("context_refiner", "noise_refiner"):
        for i in range(refiners):
            block("{}.{}".format(stack, i), "{}{}.{}".format(prefix, stack, i))
    basic = {"all_final_layer.2-1.linear": "final_layer.linear",
             "all_final_layer.2-1.adaLN_modulation.1": "final_layer.adaLN_modulation.1",
             "all_x_embedder.2-1": "x_embedder", "cap_embedder.1": "cap_embedder.1",
             "t_embedder.mlp.0": "t_embedder.mlp.0", "t_embedder.mlp.2": "t_embedder.mlp.2"}
    for a, b in basic.items():
        for end in ("weight", "bias"):
            out["{}.{}".format(a, end)] = "{}{}.{}".format(prefix, b, end)
    out["cap_embedder.0.weight"] = prefix + "cap_embedder.0.weight"
    out["x_pad_token"] = prefix + "x_pad_token"
    out["cap_pad_token"] = prefix + "cap_pad_token"
    return out


def lumina2_branch(config, key_map):
    """model_lora_keys_unet's Lumina2 branch: four stems per diffusers weight name."""
    names = z_image_diffusers_names(config, "diffusion_model.")
    for k, to in names.items():
        if k.endswith(".weight"):
            stem = k[:-len(".weight")]
            key_map["diffusion_model." + stem] = to
            key_map["transformer." + stem] = to
            key_map["lycoris_" + stem.replace(".", "_")] = to
            key_map[stem] = to
    return key_map


def standin(comfy, sd):
    class Lumina2StandIn(comfy.model_base.Lumina2):
        def __init__(self):
            object.__setattr__(self, "_sd", sd)
            object.__setattr__(self, "model_config", types.SimpleNamespace(unet_config=dict(UNET_CONFIG)))

        def state_dict(self):
            return self._sd
    return Lumina2StandIn()


def case_diffusers(b):
    peft = (".lora_B.weight", ".lora_A.weight")
    for q in ("to_q", "to_k", "to_v"):  # all three thirds of layers.0's qkv
        b.add("transformer.layers.0.attention." + q, D, D, 4, names=peft)
    b.add("transformer.layers.1.attention.to_out.0", D, D, 4, alpha=2.0, names=peft)
    b.add("transformer.noise_refiner.0.attention.to_k", D, D, 2, names=peft)
    b.add("transformer.context_refiner.0.feed_forward.w2", D, FFN, 4, names=peft)
    b.add("diffusion_model.layers.1.feed_forward.w1", FFN, D, 4, alpha=1.0, names=peft)
    b.add("layers.1.attention.to_v", D, D, 2, names=peft)  # no prefix
    b.add("transformer.all_x_embedder.2-1", D, 64, 2, names=peft)
    b.add("lycoris_noise_refiner_0_adaLN_modulation_0", 4 * D, D, 2, alpha=1.5)


def case_kohya(b):
    b.add("lora_unet_layers_0_attention_qkv", 3 * D, D, 4, alpha=2.0)
    b.add("lora_unet_layers_1_feed_forward_w3", FFN, D, 4, alpha=4.0)
    b.add("lora_unet_final_layer_linear", 64, D, 2)
    b.add("diffusion_model.layers.1.attention.out", D, D, 2, alpha=1.0)
    b.add("lora_unet_not_a_block", 8, 8, 2)  # unmatched


CASES = {"zimage_diffusers": (case_diffusers, 21, 0.75), "zimage_kohya": (case_kohya, 22, 1.25)}


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    comfy = mf.import_comfy(sys.argv[1])
    sd = mf.load_checkpoint(CHECKPOINT)
    key_map = comfy.lora.model_lora_keys_unet(standin(comfy, sd), {})
    lumina2_branch(UNET_CONFIG, key_map)
    mf.write_goldens(comfy, "zimage", CHECKPOINT, sd, key_map, CASES)


if __name__ == "__main__":
    main()
