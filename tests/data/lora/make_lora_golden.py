#!/usr/bin/env python3
"""Reference data of the LoRA issue (#37), made with ComfyUI's own functions: the LoRA key maps of
the tiny SD1/SDXL checkpoints, small LoRA files of every format ComfyUI reads, and the weights that
ComfyUI's `calculate_weight` computes from them. See README.md beside this file.

Usage: make_lora_golden.py COMFYUI_DIR [--keymaps-only]
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

Runs on the CPU with torch 1.13. Packages this machine lacks (safetensors, einops, torchvision,
transformers, tokenizers) are stubbed (../comfy_harness.py's stub_packages): ComfyUI's modules
import them at the top, but none of the functions used here (model_detection, supported_models'
state dict conversions, utils.unet_to_diffusers, lora.model_lora_keys_*, lora.load_lora,
lora.calculate_weight, weight_adapter.*, float.stochastic_rounding,
model_management.cast_to_device) calls them.
Safetensors files are read by the few lines of struct/json/numpy below and written by
comfy_harness's safetensors_write.
"""

import json
import logging
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/data: comfy_harness
from comfy_harness import safetensors_write, stub_packages  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "golden")
CHECKPOINTS = {
    "tiny-sd1": os.path.join(GOLDEN, "tiny-sd1.safetensors"),
    "tiny-sdxl": os.path.join(GOLDEN, "tiny-sdxl.safetensors"),
}

# ---------------------------------------------------------------------------------------------
# ComfyUI import: stubs for the packages it imports but the functions used here never call.

STUBBED_ROOTS = {"einops", "safetensors", "torchvision", "transformers", "tokenizers"}
STUBS = None  # comfy_harness's finder once import_comfy ran; .used: the stubs something imported


def import_comfy(comfy_dir):
    global STUBS
    STUBS = stub_packages(STUBBED_ROOTS)
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]  # comfy.cli_args parses these: model_management on the CPU
    import comfy.float
    import comfy.lora
    import comfy.lora_convert
    import comfy.model_detection
    import comfy.model_management
    import comfy.supported_models
    import comfy.utils
    return comfy


# ---------------------------------------------------------------------------------------------
# safetensors read/write (8-byte little-endian header length, JSON header, data).

DTYPES = {"F16": (np.float16, torch.float16), "F32": (np.float32, torch.float32),
          "BF16": (np.int16, torch.bfloat16), "I64": (np.int64, torch.int64)}
NAMES = {torch.float16: "F16", torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        np_dtype, torch_dtype = DTYPES[info["dtype"]]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np_dtype).copy().reshape(info["shape"])
        t = torch.from_numpy(arr)
        out[name] = t.view(torch_dtype) if torch_dtype == torch.bfloat16 else t
    return out


def write_safetensors(path, tensors, metadata=None):
    def entries():
        for name in sorted(tensors):
            t = tensors[name].contiguous()
            data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
            yield name, NAMES[t.dtype], t.shape, data
    safetensors_write(path, entries(), metadata or None)


# ---------------------------------------------------------------------------------------------
# Checkpoint → ComfyUI model keys, with the provenance of every converted tensor.

class StandIn:
    """What comfy.lora's key-map functions read of a model: state_dict() and model_config."""

    def __init__(self, sd, model_config=None):
        self._sd = sd
        self.model_config = model_config

    def state_dict(self):
        return self._sd


class Checkpoint:
    """One checkpoint converted the way ComfyUI's loader converts it (comfy/sd.py
    load_state_dict_guess_config → model_base.load_model_weights / process_clip_state_dict).

    The tiny checkpoints' widths match none of supported_models' configs, so the model class is
    chosen by name (SD15 / SDXL) with the unet_config that model_detection derives."""

    def __init__(self, comfy, name):
        self.name = name
        self.original = read_safetensors(CHECKPOINTS[name])
        md = comfy.model_detection
        prefix = md.unet_prefix_from_state_dict(self.original)
        unet_config = md.detect_unet_config(self.original, prefix)
        cls = {"tiny-sd1": comfy.supported_models.SD15, "tiny-sdxl": comfy.supported_models.SDXL}[name]
        self.model_config = cls(unet_config)

        to_load = {k[len(prefix):]: v for k, v in self.original.items() if k.startswith(prefix)}
        to_load = self.model_config.process_unet_state_dict(to_load)
        unet_sd = {"diffusion_model." + k: v for k, v in to_load.items()}
        clip_sd = self.model_config.process_clip_state_dict(dict(self.original))
        self.unet = StandIn(unet_sd, self.model_config)
        self.clip = StandIn(clip_sd)
        self.provenance = self._trace({**unet_sd, **clip_sd})

    def _trace(self, converted):
        """comfy key → {"key", "offset", "rows"[, "transpose"]}: which checkpoint tensor (and which
        rows of it) each converted tensor is. Views are found by storage; copies by value."""
        by_storage = {t.storage().data_ptr(): k for k, t in self.original.items()}
        out = {}
        for ck, t in converted.items():
            ok = by_storage.get(t.storage().data_ptr())
            if ok is not None:
                base = self.original[ok]
                offset = rows = None
                if t.shape != base.shape:
                    assert t.stride() == base.stride() and t.storage_offset() % base.stride(0) == 0
                    offset, rows = t.storage_offset() // base.stride(0), t.shape[0]
                    assert torch.equal(base.narrow(0, offset, rows), t)
                out[ck] = {"key": ok, "offset": offset, "rows": rows}
                continue
            for k, base in self.original.items():
                if base.dim() == 2 and base.t().shape == t.shape and torch.equal(base.t(), t):
                    out[ck] = {"key": k, "offset": None, "rows": None, "transpose": True}
                    break
                if base.shape == t.shape and torch.equal(base, t):
                    out[ck] = {"key": k, "offset": None, "rows": None}
                    break
            else:
                raise SystemExit("no checkpoint tensor for ComfyUI key {}".format(ck))
        return out

    def target(self, comfy_target):
        """A key-map target (a key, or ComfyUI's tuple (key, (dim, offset, size)))."""
        if isinstance(comfy_target, str):
            key, slice_ = comfy_target, None
        else:
            key, slice_ = comfy_target[0], comfy_target[1]
        if key not in self.provenance:  # mapped by ComfyUI, absent from the model: add_patches drops it
            return {"comfy_key": key, "key": None, "offset": None, "rows": None}
        src = dict(self.provenance[key])
        if slice_ is not None:
            dim, off, size = slice_
            assert dim == 0
            src["offset"] = (src["offset"] or 0) + off
            src["rows"] = size
        return {"comfy_key": key, **src}


def key_maps(comfy, ckpt):
    """ComfyUI's two key maps, each made by its own function on a fresh dict."""
    unet = comfy.lora.model_lora_keys_unet(ckpt.unet, {})
    clip = comfy.lora.model_lora_keys_clip(ckpt.clip, {})
    return unet, clip


def write_keymap(comfy, ckpt):
    unet, clip = key_maps(comfy, ckpt)
    path = os.path.join(HERE, "keymap-{}.json".format(ckpt.name))
    lines = ['{{"checkpoint": "golden/{}.safetensors",'.format(ckpt.name)]
    for part, km in (("unet", unet), ("clip", clip)):
        lines.append(' "{}": {{'.format(part))
        entries = ['{}:{}'.format(json.dumps(stem), json.dumps(ckpt.target(km[stem]), sort_keys=True, separators=(",", ":")))
                   for stem in sorted(km)]
        lines.append(",\n".join(entries))
        lines.append(" }," if part == "unet" else " }")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    json.load(open(path))
    print("{}: {} unet stems, {} clip stems".format(os.path.basename(path), len(unet), len(clip)))


# ---------------------------------------------------------------------------------------------
# LoRA files. Factors are seeded normal values, rescaled so that the patch moves its weight by
# RELATIVE times the weight's RMS (before strength), then stored as f16 like real files.

RELATIVE = 0.3


class LoraBuilder:
    """Tensors of one LoRA file for one checkpoint; each add_* writes one module's factors."""

    def __init__(self, ckpt, seed):
        self.ckpt = ckpt
        self.rng = np.random.RandomState(seed)
        self.tensors = {}
        unet, clip = ckpt.maps
        self.key_map = {**unet, **clip}
        self.converted = {**ckpt.unet.state_dict(), **ckpt.clip.state_dict()}

    def weight(self, stem):
        """The ComfyUI weight a stem maps to (the slice for a tuple target), as float32."""
        target = self.key_map[stem]
        key = target if isinstance(target, str) else target[0]
        return self.converted[key].float()

    def randn(self, *shape):
        return torch.from_numpy(self.rng.standard_normal(shape).astype(np.float32))

    def fit(self, stem, diff, tensors, scale=1.0):
        """Rescale the product factors so |scale * diff| ≈ RELATIVE * rms(W); store as f16."""
        w = self.weight(stem)
        k = (RELATIVE * w.pow(2).mean().sqrt() / (scale * diff).pow(2).mean().sqrt()).item()
        k = k ** (1.0 / len(tensors))
        for name, t in tensors.items():
            self.tensors[name] = (t * k).half()

    def alpha(self, stem, value, dtype=torch.float16):
        if value is not None:
            self.tensors[stem + ".alpha"] = torch.tensor(float(value), dtype=dtype)

    def add_lora(self, stem, rank, alpha=None, names=(".lora_up.weight", ".lora_down.weight"), mid=False):
        """up @ down (LoCon: up, mid, down with a 3x3 mid and 1x1 up/down)."""
        w = self.weight(stem)
        out, inner = w.shape[0], w.shape[1:]
        up = self.randn(out, rank)
        conv = w.dim() == 4
        if mid:
            down = self.randn(rank, inner[0])
            m = self.randn(rank, rank, *inner[1:])
            diff = torch.einsum("or,rskl,si->oikl", up, m, down)
            tensors = {stem + names[0]: up.reshape(out, rank, 1, 1),
                       stem + ".lora_mid.weight": m,
                       stem + names[1]: down.reshape(rank, inner[0], 1, 1)}
        else:
            down = self.randn(rank, int(np.prod(inner)))
            diff = up @ down
            tensors = {stem + names[0]: up.reshape(out, rank, 1, 1) if conv else up,
                       stem + names[1]: down.reshape(rank, *inner)}
        self.fit(stem, diff, tensors, 1.0 if alpha is None else alpha / rank)
        self.alpha(stem, alpha)

    def add_dora(self, stem, rank, alpha, axis):
        """LoRA plus `.dora_scale`: the norm of W on `axis` ("out": [out,1(,1,1)], "in": [1,in])
        times a spread of ±20 %, the magnitude DoRA trains."""
        self.add_lora(stem, rank, alpha)
        w = self.weight(stem)
        if axis == "out":
            norm = w.reshape(w.shape[0], -1).norm(dim=1).reshape(w.shape[0], *[1] * (w.dim() - 1))
        else:
            norm = w.transpose(0, 1).reshape(w.shape[1], -1).norm(dim=1).reshape(1, w.shape[1], *[1] * (w.dim() - 2))
        spread = 1.0 + 0.2 * torch.from_numpy(self.rng.uniform(-1, 1, tuple(norm.shape)).astype(np.float32))
        self.tensors[stem + ".dora_scale"] = (norm * spread).half()

    def add_loha(self, stem, rank, alpha=None, tucker=False):
        """Hadamard product of two low-rank products (hada_w1_a @ hada_w1_b) * (hada_w2_a @ hada_w2_b);
        tucker: the CP form with hada_t1/t2 [rank, rank, kh, kw] and w*_a [rank, out], w*_b [rank, in]."""
        w = self.weight(stem)
        out, inner = w.shape[0], w.shape[1:]
        if tucker:
            t1, t2 = self.randn(rank, rank, *inner[1:]), self.randn(rank, rank, *inner[1:])
            a1, b1, a2, b2 = self.randn(rank, out), self.randn(rank, inner[0]), self.randn(rank, out), self.randn(rank, inner[0])
            m1 = torch.einsum("ijkl,jr,ip->prkl", t1, b1, a1)
            m2 = torch.einsum("ijkl,jr,ip->prkl", t2, b2, a2)
            tensors = {stem + ".hada_t1": t1, stem + ".hada_t2": t2}
        else:
            n = int(np.prod(inner))
            a1, b1, a2, b2 = self.randn(out, rank), self.randn(rank, n), self.randn(out, rank), self.randn(rank, n)
            m1, m2 = a1 @ b1, a2 @ b2
            tensors = {}
        tensors.update({stem + ".hada_w1_a": a1, stem + ".hada_w1_b": b1,
                        stem + ".hada_w2_a": a2, stem + ".hada_w2_b": b2})
        self.fit(stem, m1 * m2, tensors, 1.0 if alpha is None else alpha / rank)
        self.alpha(stem, alpha)

    def add_lokr(self, stem, f, w1_rank=None, w2_rank=None, alpha=None):
        """Kronecker product w1 ⊗ w2, w1 [f, f]; w1 from lokr_w1_a @ lokr_w1_b when w1_rank,
        w2 from lokr_w2_a @ lokr_w2_b when w2_rank (linear only), else full (4-D on a conv)."""
        w = self.weight(stem)
        out, inn = w.shape[0], w.shape[1]
        tensors = {}
        if w1_rank:
            a, b = self.randn(f, w1_rank), self.randn(w1_rank, f)
            w1 = a @ b
            tensors.update({stem + ".lokr_w1_a": a, stem + ".lokr_w1_b": b})
        else:
            w1 = self.randn(f, f)
            tensors[stem + ".lokr_w1"] = w1
        if w2_rank:
            a, b = self.randn(out // f, w2_rank), self.randn(w2_rank, inn // f)
            w2 = a @ b
            tensors.update({stem + ".lokr_w2_a": a, stem + ".lokr_w2_b": b})
        else:
            w2 = self.randn(out // f, inn // f, *w.shape[2:])
            tensors[stem + ".lokr_w2"] = w2
        if w2.dim() == 4:
            diff = torch.kron(w1[:, :, None, None], w2)
        else:
            diff = torch.kron(w1, w2)
        # ComfyUI: alpha / rank of the factorized w2, else of w1; 1 when both are full.
        dim = w2_rank or w1_rank
        self.fit(stem, diff, tensors, alpha / dim if (alpha is not None and dim) else 1.0)
        self.alpha(stem, alpha)

    def add_diff(self, stem, bias=False, weight=True, dtype=torch.float16):
        """Full diffs: `.diff` for the weight, `.diff_b` for the bias of the same module."""
        if weight:
            w = self.weight(stem)
            self.tensors[stem + ".diff"] = (RELATIVE * w.pow(2).mean().sqrt() * self.randn(*w.shape)).to(dtype)
        if bias:
            target = self.key_map[stem]
            b = self.converted[target[:-len(".weight")] + ".bias"].float()
            self.tensors[stem + ".diff_b"] = (RELATIVE * b.pow(2).mean().sqrt() * self.randn(*b.shape)).to(dtype)

    def add_unmatched(self, stem, names=(".lora_up.weight", ".lora_down.weight"), rank=2, width=8):
        """A module no key map entry names: ComfyUI reports each of its keys as not loaded."""
        assert stem not in self.key_map
        self.tensors[stem + names[0]] = self.randn(width, rank).half()
        self.tensors[stem + names[1]] = self.randn(rank, width).half()


def case_sd1_kohya(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    for name in ("attn1_to_q", "attn1_to_k", "attn1_to_v", "attn1_to_out_0"):
        b.add_lora(u + name, 4, alpha=2.0)
    b.add_lora("lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k", 4, alpha=4.0)
    b.add_lora(u + "ff_net_0_proj", 4, alpha=1.0)
    b.add_lora(u + "ff_net_2", 4)  # no alpha: scale 1
    b.add_lora("lora_unet_down_blocks_0_attentions_0_proj_out", 2, alpha=1.0)  # 1x1 conv
    b.add_lora("lora_unet_input_blocks_4_1_proj_in", 2, alpha=1.0)  # LDM naming, 1x1 conv
    b.add_lora("lora_unet_down_blocks_0_resnets_0_conv1", 3, alpha=1.5, mid=True)  # LoCon 3x3
    b.add_lora("lora_unet_down_blocks_0_resnets_1_conv2", 3, alpha=3.0)  # plain 3x3
    b.add_lora("lora_unet_down_blocks_1_resnets_0_conv_shortcut", 2, alpha=2.0)  # plain 1x1
    t = "lora_te_text_model_encoder_layers_0_"
    for name in ("self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj", "self_attn_out_proj", "mlp_fc1"):
        b.add_lora(t + name, 4, alpha=4.0)
    b.add_lora("lora_te_text_model_encoder_layers_1_mlp_fc2", 2, alpha=1.0)
    b.add_unmatched("lora_unet_not_a_block")


def case_sd1_peft(b):
    u = "unet.down_blocks.0.attentions.0.transformer_blocks.0."
    peft = (".lora_B.weight", ".lora_A.weight")
    b.add_lora(u + "attn1.processor.to_q", 4, names=peft)
    b.add_lora(u + "attn1.processor.to_out", 4, names=peft)  # to_out.0 without ".0"
    b.add_lora(u + "ff.net.0.proj", 4, alpha=2.0, names=peft)
    b.add_lora("unet.down_blocks.0.attentions.0.proj_in", 2, names=peft)  # 1x1 conv
    b.add_lora("unet.mid_block.attentions.0.transformer_blocks.0.attn2.processor.to_k", 4, names=peft)
    b.add_lora("down_blocks.1.attentions.0.transformer_blocks.0.attn1.processor.to_v", 4, names=peft)  # no prefix
    b.add_lora(u + "attn2.processor.to_k", 4, names=(".lora.up.weight", ".lora.down.weight"))
    b.add_lora(u + "attn2.processor.to_v", 4, names=(".lora.up.weight", ".lora.down.weight"))
    b.add_lora(u + "attn1.processor.to_k", 4, names=("_lora.up.weight", "_lora.down.weight"))
    t = "text_encoder.text_model.encoder.layers.0."
    b.add_lora(t + "self_attn.q_proj", 4, names=peft)
    b.add_lora(t + "mlp.fc1", 4, alpha=8.0, names=peft)
    lin = (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight")
    b.add_lora("text_encoder.text_model.encoder.layers.1.self_attn.k_proj", 4, names=lin)
    b.add_lora("text_encoder.text_model.encoder.layers.1.self_attn.out_proj", 2, names=lin)
    # PEFT's own name of an attention projection (no ".processor."): ComfyUI a125cd84 maps only
    # the processor form for SD1/SDXL attention, so it reports these keys as not loaded.
    b.add_unmatched(u + "attn1.to_v", names=peft)


def case_sd1_loha(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    b.add_loha(u + "attn1_to_q", 4, alpha=2.0)
    b.add_loha(u + "attn2_to_out_0", 2)  # no alpha
    b.add_loha(u + "ff_net_2", 4, alpha=4.0)
    b.add_loha("lora_unet_down_blocks_0_resnets_0_conv1", 2, alpha=1.0)  # 3x3 conv, flat w*_b
    b.add_loha("lora_unet_down_blocks_0_resnets_1_conv2", 2, alpha=2.0, tucker=True)  # 3x3 conv, CP
    b.add_loha("lora_unet_down_blocks_0_attentions_0_proj_in", 2, alpha=1.0)  # 1x1 conv
    b.add_loha("lora_te_text_model_encoder_layers_0_self_attn_v_proj", 4, alpha=4.0)
    b.add_loha("lora_te_text_model_encoder_layers_1_mlp_fc1", 2, alpha=1.0)


def case_sd1_lokr(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    b.add_lokr(u + "attn1_to_q", 4, alpha=8.0)  # w1, w2 full: alpha is loaded but scales by 1
    b.add_lokr(u + "attn1_to_k", 4, w2_rank=2, alpha=1.0)  # w1 full, w2 = w2_a @ w2_b
    b.add_lokr(u + "ff_net_0_proj", 8, w2_rank=4)  # no alpha
    b.add_lokr(u + "attn2_to_v", 4, w1_rank=2, alpha=1.0)  # w1 = w1_a @ w1_b, w2 full
    b.add_lokr("lora_unet_down_blocks_0_resnets_0_conv2", 4, alpha=1.0)  # 3x3 conv, w2 4-D
    b.add_lokr("lora_unet_down_blocks_1_resnets_0_conv_shortcut", 2, w1_rank=1, alpha=0.5)  # 1x1 conv
    b.add_lokr("lora_te_text_model_encoder_layers_0_mlp_fc2", 2, w2_rank=4, alpha=2.0)


def case_sd1_dora(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    b.add_dora(u + "attn1_to_q", 4, 2.0, "out")
    b.add_dora(u + "ff_net_0_proj", 4, 4.0, "out")
    b.add_dora("lora_unet_down_blocks_0_resnets_0_conv1", 2, 1.0, "out")  # [out, 1, 1, 1]
    b.add_dora(u + "attn2_to_k", 4, 4.0, "in")  # [1, in]: ComfyUI normalizes per input column
    b.add_dora("lora_te_text_model_encoder_layers_0_self_attn_out_proj", 4, 4.0, "out")
    b.add_dora("lora_te_text_model_encoder_layers_1_mlp_fc2", 2, 2.0, "in")


def case_sd1_diff(b):
    b.add_diff("diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q")
    b.add_diff("diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_out.0", bias=True)
    b.add_diff("lora_unet_down_blocks_0_attentions_0_proj_out", bias=True)  # 1x1 conv
    b.add_diff("lora_unet_down_blocks_0_resnets_0_conv2", weight=False, bias=True, dtype=torch.float32)
    b.add_diff("text_encoders.clip_l.transformer.text_model.encoder.layers.0.self_attn.q_proj", bias=True)
    b.add_diff("lora_te_text_model_encoder_layers_1_mlp_fc1")


def case_sdxl_kohya(b):
    u = "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_"
    for name in ("attn1_to_q", "attn1_to_k", "attn1_to_v", "attn1_to_out_0", "attn2_to_k", "attn2_to_out_0"):
        b.add_lora(u + name, 4, alpha=4.0)
    b.add_lora("lora_unet_mid_block_attentions_0_transformer_blocks_1_attn2_to_v", 4, alpha=2.0)
    b.add_lora("lora_unet_down_blocks_1_attentions_0_proj_in", 4, alpha=4.0)  # linear on SDXL
    b.add_lora("lora_unet_up_blocks_0_resnets_0_conv_shortcut", 4, alpha=4.0)  # 1x1 conv
    t1 = "lora_te1_text_model_encoder_layers_0_"
    for name in ("self_attn_q_proj", "self_attn_out_proj", "mlp_fc1"):
        b.add_lora(t1 + name, 4, alpha=4.0)
    t2 = "lora_te2_text_model_encoder_layers_0_"
    for name in ("self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj", "self_attn_out_proj", "mlp_fc1", "mlp_fc2"):
        b.add_lora(t2 + name, 4, alpha=4.0)
    b.add_lora("lora_te2_text_model_encoder_layers_1_self_attn_k_proj", 4, alpha=2.0)  # k alone: middle rows


def case_sdxl_peft(b):
    peft = (".lora_B.weight", ".lora_A.weight")
    b.add_lora("unet.mid_block.attentions.0.transformer_blocks.0.attn2.processor.to_q", 4, names=peft)
    b.add_lora("unet.down_blocks.2.attentions.1.proj_out", 4, alpha=2.0, names=peft)
    b.add_lora("text_encoder.text_model.encoder.layers.1.self_attn.k_proj", 4, names=peft)
    t2 = "text_encoder_2.text_model.encoder.layers.1."
    b.add_lora(t2 + "self_attn.q_proj", 4, names=peft)  # q and v: first and last rows of in_proj
    b.add_lora(t2 + "self_attn.v_proj", 2, alpha=1.0, names=peft)
    b.add_lora(t2 + "self_attn.out_proj", 4, names=peft)


def case_sd1_stack_a(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    for name in ("attn1_to_q", "attn1_to_k", "ff_net_0_proj"):
        b.add_lora(u + name, 4, alpha=4.0)
    b.add_lora("lora_unet_down_blocks_0_resnets_0_conv1", 2, alpha=2.0)
    for name in ("self_attn_q_proj", "mlp_fc1"):
        b.add_lora("lora_te_text_model_encoder_layers_0_" + name, 4, alpha=4.0)


def case_sd1_stack_b(b):
    u = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_"
    for name in ("attn1_to_q", "attn2_to_v", "ff_net_0_proj"):
        b.add_lora(u + name, 2, alpha=1.0)
    for name in ("self_attn_q_proj", "self_attn_v_proj"):
        b.add_lora("lora_te_text_model_encoder_layers_0_" + name, 2, alpha=2.0)


# name: (builder, checkpoint, format, seed)
CASES = {
    "sd1_kohya": (case_sd1_kohya, "tiny-sd1", "kohya", 101),
    "sd1_peft": (case_sd1_peft, "tiny-sd1", "diffusers/peft", 102),
    "sd1_loha": (case_sd1_loha, "tiny-sd1", "lycoris-loha", 103),
    "sd1_lokr": (case_sd1_lokr, "tiny-sd1", "lycoris-lokr", 104),
    "sd1_dora": (case_sd1_dora, "tiny-sd1", "kohya+dora", 105),
    "sd1_diff": (case_sd1_diff, "tiny-sd1", "diff", 106),
    "sdxl_kohya": (case_sdxl_kohya, "tiny-sdxl", "kohya", 107),
    "sdxl_peft": (case_sdxl_peft, "tiny-sdxl", "diffusers/peft", 110),
    "sd1_stack_a": (case_sd1_stack_a, "tiny-sd1", "kohya", 108),
    "sd1_stack_b": (case_sd1_stack_b, "tiny-sd1", "kohya", 109),
}
SINGLE_STRENGTHS = (0.75, 1.25)  # (strength_model, strength_clip)
STACK = ("sd1_stack", [("sd1_stack_a", 0.8, 0.6), ("sd1_stack_b", -0.5, 1.2)])


# ---------------------------------------------------------------------------------------------
# Goldens: ComfyUI's LoraLoader path (comfy/sd.py load_lora_for_models → lora.load_lora →
# ModelPatcher.add_patches) and its patch_weight_to_device numerics (weight cast to float32,
# lora.calculate_weight, float.stochastic_rounding back to the stored dtype).

class LogCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def comfy_key_map(comfy, ckpt):
    """load_lora_for_models: one dict, UNet entries first, then CLIP's."""
    key_map = comfy.lora.model_lora_keys_unet(ckpt.unet, {})
    return comfy.lora.model_lora_keys_clip(ckpt.clip, key_map)


def add_patches(model_sd, loaded, strength, patches):
    """ModelPatcher.add_patches: the entries whose key the model has, appended in order."""
    added = set()
    for k, v in loaded.items():
        key, offset, function = (k, None, None) if isinstance(k, str) else (k[0], k[1], k[2] if len(k) > 2 else None)
        if key in model_sd:
            added.add(k)
            patches.setdefault(key, []).append((strength, v, 1.0, offset, function))
    return added


def load_loras(comfy, ckpt, loras):
    """loras: [(tensors, strength_model, strength_clip)] in LoraLoader order. Returns the patches
    per ComfyUI key and, per file, ComfyUI's "lora key not loaded" keys."""
    key_map = comfy_key_map(comfy, ckpt)
    patches, not_loaded = {}, []
    for tensors, strength_model, strength_clip in loras:
        capture = LogCapture()
        logging.getLogger().addHandler(capture)
        try:
            lora = comfy.lora_convert.convert_lora(dict(tensors))
            loaded = comfy.lora.load_lora(lora, key_map)
        finally:
            logging.getLogger().removeHandler(capture)
        prefix = "lora key not loaded: "
        not_loaded.append(sorted(m[len(prefix):] for m in capture.messages if m.startswith(prefix)))
        k = add_patches(ckpt.unet.state_dict(), loaded, strength_model, patches)
        k1 = add_patches(ckpt.clip.state_dict(), loaded, strength_clip, patches)
        dropped = [x for x in loaded if x not in k and x not in k1]
        if dropped:
            raise SystemExit("ComfyUI would log NOT LOADED for {}".format(dropped))
    return patches, not_loaded


def patch_weights(comfy, ckpt, patches):
    """patch_weight_to_device per ComfyUI key, written back into the checkpoint tensors (the
    fused bigG in_proj patched in its q/k/v rows). Returns {original name: (f32, f16, bf16)}."""
    import comfy.model_patcher
    converted = {**ckpt.unet.state_dict(), **ckpt.clip.state_dict()}
    out = {}
    for key in sorted(patches):
        weight = converted[key]
        temp = weight.to(torch.float32, copy=True)
        capture = LogCapture()
        logging.getLogger().addHandler(capture)
        try:
            result = comfy.lora.calculate_weight(patches[key], temp, key)
        finally:
            logging.getLogger().removeHandler(capture)
        if capture.messages:  # calculate_weight logs a failed patch and leaves the weight as it was
            raise SystemExit("calculate_weight on {}: {}".format(key, capture.messages))
        seed = comfy.model_patcher.string_to_seed(key)
        r16 = comfy.float.stochastic_rounding(result, torch.float16, seed=seed)
        rbf = comfy.float.stochastic_rounding(result, torch.bfloat16, seed=seed)
        src = ckpt.provenance[key]
        orig = ckpt.original[src["key"]]
        if src["key"] not in out:
            out[src["key"]] = (orig.float().clone(), orig.clone(), orig.float().to(torch.bfloat16))
        for full, part in zip(out[src["key"]], (result, r16, rbf)):
            if src.get("transpose"):
                part = part.t()
            if src["offset"] is None:
                full.copy_(part)
            else:
                full.narrow(0, src["offset"], src["rows"]).copy_(part)
    return out


def check_changed(ckpt, patches, golden, case):
    """Every patched ComfyUI weight (each fused slice too) must differ from the checkpoint."""
    for key in patches:
        src = ckpt.provenance[key]
        orig = ckpt.original[src["key"]].float()
        new = golden[src["key"]][0]
        if src["offset"] is not None:
            orig, new = orig.narrow(0, src["offset"], src["rows"]), new.narrow(0, src["offset"], src["rows"])
        rel = ((new - orig).pow(2).mean().sqrt() / orig.pow(2).mean().sqrt()).item()
        if torch.equal(orig, new) or rel < 1e-3:
            raise SystemExit("{}: {} unchanged by its patch (relative change {})".format(case, key, rel))
    for name, (f32, f16, bf16) in golden.items():
        if torch.equal(f16, ckpt.original[name]):
            raise SystemExit("{}: {}@f16 equals the checkpoint tensor".format(case, name))


PLAIN_FORMS = [(".lora_up.weight", ".lora_down.weight"), ("_lora.up.weight", "_lora.down.weight"),
               (".lora_B.weight", ".lora_A.weight"), (".lora.up.weight", ".lora.down.weight"),
               (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight")]


def check_plain_lora(ckpt, loras, golden, case):
    """An independent check of the harness (not a source of goldens): where every patch on a
    weight is a plain `.lora_up/.lora_down` pair, the float32 golden must equal, in float64,
    W + sum(strength * alpha/rank * up @ down) on its rows of the checkpoint tensor."""
    key_map = {**ckpt.maps[0], **ckpt.maps[1]}
    clip_keys = ckpt.clip.state_dict()
    expected, other = {}, set()
    for tensors, sm, sc in loras:
        for stem in {s for s in key_map if any(k.startswith(s) for k in tensors)}:
            key = key_map[stem]
            pair = [p for p in PLAIN_FORMS if stem + p[0] in tensors]
            if not pair or stem + ".lora_mid.weight" in tensors or stem + ".dora_scale" in tensors:
                if any(k.startswith(stem + ".") for k in tensors):
                    other.add(key)
                continue
            up, down = tensors[stem + pair[0][0]].double(), tensors[stem + pair[0][1]].double()
            rank = down.shape[0]
            scale = tensors[stem + ".alpha"].item() / rank if stem + ".alpha" in tensors else 1.0
            strength = sc if key in clip_keys else sm
            d = strength * scale * (up.flatten(1) @ down.flatten(1))
            expected[key] = expected.get(key, 0) + d
    checked = 0
    for key, d in expected.items():
        if key in other:
            continue
        src = ckpt.target(key)
        w = ckpt.original[src["key"]].double()
        g = golden[src["key"]][0].double()
        if src.get("transpose"):
            w, g = w.t(), g.t()
        if src["offset"] is not None:
            w, g = w.narrow(0, src["offset"], src["rows"]), g.narrow(0, src["offset"], src["rows"])
        err = ((w + d.reshape(w.shape)) - g).abs().max().item()
        if err > 1e-5 * w.abs().max().item():
            raise SystemExit("{}: {} differs from W + strength * alpha/rank * up @ down by {}".format(case, key, err))
        checked += 1
    return checked


def relative_changes(ckpt, golden):
    out = {}
    for name, (f32, _, _) in golden.items():
        orig = ckpt.original[name].float()
        out[name] = round(((f32 - orig).pow(2).mean().sqrt() / orig.pow(2).mean().sqrt()).item(), 3)
    return out


def golden_tensors(golden):
    out = {}
    for name, (f32, f16, bf16) in golden.items():
        out[name] = f32
        out[name + "@f16"] = f16
        out[name + "@bf16"] = bf16
    return out


def make_case(comfy, ckpts, name, files, expected_not_loaded):
    """files: [(case file, strength_model, strength_clip)]; all on one checkpoint."""
    ckpt = ckpts[CASES[files[0][0]][1]]
    loras = [(read_safetensors(os.path.join(HERE, f + ".safetensors")), sm, sc) for f, sm, sc in files]
    patches, not_loaded = load_loras(comfy, ckpt, loras)
    for (f, _, _), got in zip(files, not_loaded):
        if got != sorted(expected_not_loaded.get(f, [])):
            raise SystemExit("{}: ComfyUI did not load {} (expected only {})".format(f, got, expected_not_loaded.get(f, [])))
    golden = patch_weights(comfy, ckpt, patches)
    check_changed(ckpt, patches, golden, name)
    plain = check_plain_lora(ckpt, loras, golden, name)
    write_safetensors(os.path.join(HERE, name + ".golden.safetensors"), golden_tensors(golden))
    changes = relative_changes(ckpt, golden)
    print("{}: {} checkpoint tensors from {} ComfyUI weights ({} checked against the plain LoRA "
          "formula); relative change {}..{}".format(name, len(golden), len(patches), plain,
                                                    min(changes.values()), max(changes.values())))
    return {
        "checkpoint": "golden/{}.safetensors".format(ckpt.name),
        "format": CASES[files[0][0]][2] if len(files) == 1 else "stack of " + ", ".join(CASES[f][2] for f, _, _ in files),
        "loras": [{"file": f + ".safetensors", "strength_model": sm, "strength_clip": sc} for f, sm, sc in files],
        "golden": name + ".golden.safetensors",
        "patched": sorted(golden),
        "patched_comfy": {k: ckpt.target(k) for k in sorted(patches)},
        "patch_count": {k: len(v) for k, v in sorted(patches.items())},
        "not_loaded": {f + ".safetensors": got for (f, _, _), got in zip(files, not_loaded)},
        "relative_change": changes,
    }


def write_lora_files(ckpts):
    unmatched = {}
    for name, (build, ckpt_name, _, seed) in CASES.items():
        b = LoraBuilder(ckpts[ckpt_name], seed)
        build(b)
        meta = {"format": "pt", "made_by": "tests/data/lora/make_lora_golden.py"}
        write_safetensors(os.path.join(HERE, name + ".safetensors"), b.tensors, meta)
        unmatched[name] = [k for k in b.tensors if k.split(".")[0] in UNMATCHED_ROOTS or
                           any(k.startswith(s) for s in UNMATCHED_STEMS)]
    return unmatched


# The deliberately unmatched modules (see add_unmatched).
UNMATCHED_ROOTS = {"lora_unet_not_a_block"}
UNMATCHED_STEMS = ("unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_v.",)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    keymaps_only = "--keymaps-only" in sys.argv[2:]
    comfy = import_comfy(os.path.abspath(sys.argv[1]))
    ckpts = {name: Checkpoint(comfy, name) for name in CHECKPOINTS}
    for ckpt in ckpts.values():
        ckpt.maps = key_maps(comfy, ckpt)
        write_keymap(comfy, ckpt)
    if keymaps_only:
        return
    unmatched = write_lora_files(ckpts)
    cases = {}
    for name in CASES:
        if not name.startswith(STACK[0]):
            cases[name] = make_case(comfy, ckpts, name, [(name,) + SINGLE_STRENGTHS], unmatched)
    cases[STACK[0]] = make_case(comfy, ckpts, STACK[0], STACK[1], unmatched)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump({"comfyui": "Comfy-Org/ComfyUI a125cd84", "cases": cases}, f, indent=1, sort_keys=True)
        f.write("\n")
    print("stubbed modules:", sorted(STUBS.used))


if __name__ == "__main__":
    main()
