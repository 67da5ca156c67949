#!/usr/bin/env python3
"""Reference data of the LoRA issue (#37), made with ComfyUI's own functions: the LoRA key maps of
the tiny SD1/SDXL checkpoints, small LoRA files of every format ComfyUI reads, and the weights that
ComfyUI's `calculate_weight` computes from them. See README.md beside this file.

Usage: make_lora_golden.py COMFYUI_DIR [--keymaps-only]
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

Runs on the CPU with torch 1.13. Packages this machine lacks (safetensors, einops, torchvision,
transformers, tokenizers) are stubbed in sys.modules: ComfyUI's modules import them at the top,
but none of the functions used here (model_detection, supported_models' state dict conversions,
utils.unet_to_diffusers, lora.model_lora_keys_*, lora.load_lora, lora.calculate_weight,
weight_adapter.*, float.stochastic_rounding, model_management.cast_to_device) calls them.
Safetensors files are read and written by the few lines of struct/json/numpy below.
"""

import importlib.abc
import importlib.machinery
import json
import os
import struct
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "golden")
CHECKPOINTS = {
    "tiny-sd1": os.path.join(GOLDEN, "tiny-sd1.safetensors"),
    "tiny-sdxl": os.path.join(GOLDEN, "tiny-sdxl.safetensors"),
}

# ---------------------------------------------------------------------------------------------
# ComfyUI import: stubs for the packages it imports but the functions used here never call.

STUBBED_ROOTS = {"einops", "safetensors", "torchvision", "transformers", "tokenizers"}
STUBBED = []


class _Anything:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, n):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED_ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        STUBBED.append(spec.name)
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, m):
        pass


def import_comfy(comfy_dir):
    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]  # comfy.cli_args parses these: model_management on the CPU
    import comfy.float
    import comfy.lora
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
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


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


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    keymaps_only = "--keymaps-only" in sys.argv[2:]
    comfy = import_comfy(os.path.abspath(sys.argv[1]))
    ckpts = {name: Checkpoint(comfy, name) for name in CHECKPOINTS}
    for ckpt in ckpts.values():
        write_keymap(comfy, ckpt)
    if keymaps_only:
        return


if __name__ == "__main__":
    main()
