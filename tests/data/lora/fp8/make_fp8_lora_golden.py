#!/usr/bin/env python3
"""Reference data for issue 38 item 5: ComfyUI's LoRA patching of weights stored as float8_e4m3fn
(float32 accumulate, stochastic rounding back to fp8), made by running ComfyUI's own
ModelPatcher.add_patches / patch_weight_to_device on ComfyUI's own layer classes. See README.md.

Usage: make_fp8_lora_golden.py COMFYUI_DIR [--check]
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and node_helpers.py), commit a125cd84.
  --check: recompute and compare with fp8_lora_golden.safetensors / cases.json instead of writing
           (exit 0 and "ALL MATCH" when every byte agrees). Meant for torch >= 2.1, where it runs
           with the real torch.float8_e4m3fn and no shim (the goldens were made on torch 1.13).

On torch without float8 dtypes (1.13) the shim of ../../fp8/fp8_shim.py is installed (float8_e4m3fn
stood in for by float64, float16 log2/floor/clamp computed in float32; ../../fp8/README.md), and
the round-to-nearest-even casts to e4m3fn are computed from the format's definition with exact
rationals (fp8_shim.rne_expected). On torch >= 2.1 nothing is shimmed and torch casts.
"""

import json
import logging
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LORA_DIR = os.path.dirname(HERE)
FP8_DIR = os.path.join(LORA_DIR, "..", "fp8")

REAL_FP8 = hasattr(torch, "float8_e4m3fn")
if not REAL_FP8:
    sys.path.insert(0, FP8_DIR)
    import fp8_shim  # noqa: E402  (installs the shim: must precede the ComfyUI import)
sys.path.insert(0, LORA_DIR)
import make_lora_golden as mlg  # noqa: E402

E4M3 = torch.float8_e4m3fn  # float64 under the shim
GOLDEN = os.path.join(HERE, "fp8_lora_golden.safetensors")
CASES_JSON = os.path.join(HERE, "cases.json")

LORA_FILE = "sd1_kohya"  # ../sd1_kohya.safetensors
STRENGTH_MODEL = 0.75  # the strength_model cases.json uses for sd1_kohya
STRENGTH_CLIP = 1.25  # (no CLIP weight here; the key map still holds CLIP stems, as in LoraLoader)

# ComfyUI model keys (all patched by sd1_kohya). Linear layers in both modes; Conv2d only at_load:
# ComfyUI's scaled_fp8_ops overrides Linear alone (its Conv2d is manual_cast.Conv2d without
# convert_weight/set_weight, built in the model's unet_dtype, since sd.py sets weight_dtype=None
# for a scaled fp8 checkpoint), so a scaled-fp8 model has no fp8 conv weight to patch.
WEIGHTS = [
    ("diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", "Linear", "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"),
    ("diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_k.weight", "Linear", "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k"),
    ("diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_out.0.weight", "Linear", "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0"),
    ("diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.0.proj.weight", "Linear", "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_ff_net_0_proj"),
    ("diffusion_model.input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight", "Linear", "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k"),
    ("diffusion_model.input_blocks.4.1.proj_in.weight", "Conv2d", "lora_unet_input_blocks_4_1_proj_in"),
    ("diffusion_model.input_blocks.2.0.out_layers.3.weight", "Conv2d", "lora_unet_down_blocks_0_resnets_1_conv2"),
    ("diffusion_model.input_blocks.1.0.in_layers.2.weight", "Conv2d", "lora_unet_down_blocks_0_resnets_0_conv1"),
]
MODES = ("at_load", "scaled")

# ---------------------------------------------------------------------------------------------
# fp8 codes <-> tensors of dtype E4M3 (real float8, or the float64 stand-in holding fp8 values).

if not REAL_FP8:
    _GRID = [float(v) for v in fp8_shim.fp8_grid(0)][:0x7F]  # codes 0..0x7e; 0x7f is NaN
    _DECODE = np.array(_GRID + [float("nan")] + [-v for v in _GRID] + [float("nan")], dtype=np.float64)
    _ENCODE = {}
    for _c in range(256):
        if _c & 0x7F != 0x7F:
            _ENCODE[(abs(float(_DECODE[_c])), _c >> 7)] = _c
    _RNE_MEMO = {}


def rne_codes(x):
    """Round-to-nearest-even float32 -> e4m3fn codes (uint8), torch's .to(torch.float8_e4m3fn)."""
    assert x.dtype == torch.float32
    if REAL_FP8:
        return x.to(E4M3).view(torch.uint8)
    out = []
    for v in x.reshape(-1).tolist():
        if v not in _RNE_MEMO:
            _RNE_MEMO[v] = fp8_shim.rne_expected(v, 0)
        out.append(_RNE_MEMO[v])
    return torch.tensor(out, dtype=torch.uint8).reshape(x.shape)


def from_codes(codes):
    """uint8 codes -> a tensor of dtype E4M3."""
    if REAL_FP8:
        return codes.contiguous().view(E4M3)
    return torch.from_numpy(_DECODE[codes.numpy().astype(np.int64)])


def to_codes(t):
    """a tensor of dtype E4M3 -> uint8 codes (every value must lie on the e4m3fn grid)."""
    assert t.dtype == E4M3, t.dtype
    if REAL_FP8:
        return t.contiguous().view(torch.uint8)
    flat = t.reshape(-1).tolist()
    codes = []
    for v in flat:
        if v != v:
            codes.append(0x7F)
            continue
        codes.append(_ENCODE[(abs(v), 1 if np.copysign(1.0, v) < 0 else 0)])
    return torch.tensor(codes, dtype=torch.uint8).reshape(t.shape)


def decode64(codes):
    """uint8 codes -> float64 values (NaN for 0x7f/0xff)."""
    return from_codes(codes).to(torch.float64) if REAL_FP8 else from_codes(codes)


# ---------------------------------------------------------------------------------------------
# The model: ComfyUI layer objects under their model keys, as UNETLoader(weight_dtype=fp8_e4m3fn)
# (at_load: comfy.ops.manual_cast layers in float8_e4m3fn) or a scaled fp8 checkpoint (scaled:
# comfy.ops.scaled_fp8_ops(override_dtype=float8_e4m3fn).Linear with its scale_weight) builds it.

def build_model(comfy, mode, stored, scales):
    root = torch.nn.Module()
    scaled_ops = comfy.ops.scaled_fp8_ops(override_dtype=E4M3) if mode == "scaled" else None
    for key, kind, _ in WEIGHTS:
        if key not in stored:
            continue
        codes = stored[key]
        shape = list(codes.shape)
        parts = key.split(".")
        parent = root
        for p in parts[:-2]:
            if p not in parent._modules:
                parent.add_module(p, torch.nn.Module())
            parent = parent._modules[p]
        if kind == "Linear":
            if mode == "scaled":
                layer = scaled_ops.Linear(shape[1], shape[0], bias=False)
                layer.scale_weight.data.copy_(scales[key])
            else:
                layer = comfy.ops.manual_cast.Linear(shape[1], shape[0], bias=False, dtype=E4M3)
        else:
            layer = comfy.ops.manual_cast.Conv2d(shape[1], shape[0], shape[2], padding=shape[2] // 2, bias=False, dtype=E4M3)
        assert layer.weight.dtype == E4M3
        # load_state_dict copies the stored fp8 tensor into the fp8 parameter
        layer.weight.requires_grad_(False)
        layer.weight.data.copy_(from_codes(codes).reshape(layer.weight.shape))
        parent.add_module(parts[-2], layer)
    return root


def stored_weights(ckpt, mode):
    """The fp8 tensors a model holds before patching: {comfy key: uint8 codes}, {comfy key: scale}."""
    stored, scales = {}, {}
    converted = ckpt.unet.state_dict()
    for key, kind, _ in WEIGHTS:
        if mode == "scaled" and kind != "Linear":
            continue
        w = converted[key].to(torch.float32)  # f16 checkpoint value, exact in float32
        if mode == "at_load":
            stored[key] = rne_codes(w)
        else:
            scale = w.abs().max() / 448.0  # float32 scalar tensor, float32 division
            assert scale.dtype == torch.float32 and scale.dim() == 0
            stored[key] = rne_codes(w / scale)  # float32 division by the float32 scalar, then RNE
            scales[key] = scale
    return stored, scales


class Recorder:
    """Wraps comfy.lora.calculate_weight (ModelPatcher looks it up at call time) to keep its
    float32 output and fail on any warning it logs."""

    def __init__(self, comfy):
        self.comfy = comfy
        self.orig = comfy.lora.calculate_weight
        self.out = {}

    def __call__(self, patches, weight, key, *a, **k):
        capture = mlg.LogCapture()
        logging.getLogger().addHandler(capture)
        try:
            assert weight.dtype == torch.float32
            r = self.orig(patches, weight, key, *a, **k)
        finally:
            logging.getLogger().removeHandler(capture)
        if capture.messages:
            raise SystemExit("calculate_weight on {}: {}".format(key, capture.messages))
        assert r.dtype == torch.float32
        self.out[key] = r.detach().clone()
        return r


def run_mode(comfy, ckpt, lora_tensors, mode):
    import comfy.model_patcher
    stored, scales = stored_weights(ckpt, mode)
    model = build_model(comfy, mode, stored, scales)
    cpu = torch.device("cpu")
    patcher = comfy.model_patcher.ModelPatcher(model, load_device=cpu, offload_device=cpu)
    # comfy.sd.load_lora_for_models: UNet key map then CLIP key map, convert_lora, load_lora,
    # add_patches(loaded, strength_model) on the model patcher.
    key_map = mlg.comfy_key_map(comfy, ckpt)
    loaded = comfy.lora.load_lora(comfy.lora_convert.convert_lora(dict(lora_tensors)), key_map)
    added = patcher.add_patches(loaded, STRENGTH_MODEL)
    if sorted(added) != sorted(stored):
        raise SystemExit("{}: patches landed on {}, expected {}".format(mode, sorted(added), sorted(stored)))
    rec = Recorder(comfy)
    comfy.lora.calculate_weight = rec
    try:
        with torch.no_grad():  # ComfyUI executes prompts under torch.inference_mode()
            for key in sorted(stored):
                patcher.patch_weight_to_device(key, device_to=cpu)
    finally:
        comfy.lora.calculate_weight = rec.orig
    patched = {}
    for key in stored:
        w = comfy.utils.get_attr(model, key)
        assert w.dtype == E4M3 and list(w.shape) == list(stored[key].shape)
        patched[key] = to_codes(w.data)
    return stored, scales, rec.out, patched


# ---------------------------------------------------------------------------------------------
# Checks (independent of ComfyUI's code; they fail the run).

FINITE = None


def fp8_finite_values():
    global FINITE
    if FINITE is None:
        codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
        FINITE = np.unique(decode64(codes).numpy())
    return FINITE


def check_rounding(key, mode, calc, scale, patched):
    """Every patched value is one of the two e4m3fn values around half(calc [/ scale]) (ComfyUI
    rounds to float16 first), or ±448 beyond the range. Returns how many are not the RNE value."""
    x = calc / scale if scale is not None else calc
    t = x.to(torch.float16).to(torch.float64).reshape(-1).numpy()
    p = decode64(patched).reshape(-1).numpy()
    if np.isnan(p).any():
        raise SystemExit("{} {}: NaN code in the patched weight".format(mode, key))
    grid = fp8_finite_values()
    tc = np.clip(t, -448.0, 448.0)
    hi = grid[np.searchsorted(grid, tc, side="left")]
    lo = grid[np.searchsorted(grid, tc, side="right") - 1]
    ok = (p == lo) | (p == hi)
    if not ok.all():
        i = int(np.argmin(ok))
        raise SystemExit("{} {}: element {} = {} is not a neighbour of {}".format(mode, key, i, p[i], t[i]))
    rne = decode64(rne_codes(torch.from_numpy(t).float())).reshape(-1).numpy()
    return int((p != rne).sum())


def check_plain_lora(key, stem, lora, stored, scale, calc):
    """calculate_weight's output equals the dequantized weight + strength * alpha/rank * up @ down
    (float64) for a plain up/down pair; LoCon (lora_mid) is skipped. Returns True if checked."""
    if stem + ".lora_mid.weight" in lora:
        return False
    up = lora[stem + ".lora_up.weight"].double().flatten(1)
    down = lora[stem + ".lora_down.weight"].double().flatten(1)
    alpha = lora[stem + ".alpha"].double().item() / down.shape[0] if stem + ".alpha" in lora else 1.0
    w = decode64(stored)
    if scale is not None:
        w = (w.float() * scale).double()  # convert_weight: float32 multiply
    want = w + (STRENGTH_MODEL * alpha * (up @ down)).reshape(w.shape)
    err = (want - calc.double()).abs().max().item()
    if err > 1e-5 * want.abs().max().item():
        raise SystemExit("{}: calculate_weight differs from W + s*alpha/r*up@down by {}".format(key, err))
    return True


# ---------------------------------------------------------------------------------------------

def golden_name(mode, key, what):
    return "{}/model.{}.{}".format(mode, key, what)


def compute(comfy):
    ckpt = mlg.Checkpoint(comfy, "tiny-sd1")
    ckpt.maps = mlg.key_maps(comfy, ckpt)
    lora = mlg.read_safetensors(os.path.join(LORA_DIR, LORA_FILE + ".safetensors"))
    import comfy.model_patcher
    tensors, weights = {}, []
    results = {m: run_mode(comfy, ckpt, lora, m) for m in MODES}
    for key, kind, stem in WEIGHTS:
        name = "model." + key
        assert name in ckpt.original and ckpt.provenance[key]["key"] == name
        entry = {"name": name, "comfy_key": key, "seed": comfy.model_patcher.string_to_seed(key),
                 "layer": kind, "shape": list(ckpt.original[name].shape), "lora_stem": stem,
                 "lora_form": "locon (lora_mid)" if stem + ".lora_mid.weight" in lora else "lora up/down",
                 "modes": {}}
        for mode in MODES:
            stored, scales, calc, patched = results[mode]
            if key not in stored:
                continue
            scale = scales.get(key)
            s, p, c = stored[key], patched[key], calc[key]
            changed = int((s != p).sum())
            if changed == 0:
                raise SystemExit("{} {}: the LoRA changed no element".format(mode, key))
            not_rne = check_rounding(key, mode, c, scale, p)
            # the README's formula, called directly, gives what ModelPatcher stored
            direct = comfy.float.stochastic_rounding(c / scale if scale is not None else c, E4M3, seed=entry["seed"])
            if not torch.equal(to_codes(direct), p):
                raise SystemExit("{} {}: stochastic_rounding(calculated{}, seed) != patched".format(
                    mode, key, " / scale" if scale is not None else ""))
            plain = check_plain_lora(key, stem, lora, s, scale, c)
            tensors[golden_name(mode, key, "stored")] = s
            tensors[golden_name(mode, key, "patched")] = p
            tensors[golden_name(mode, key, "calculated")] = c
            m = {"stored": golden_name(mode, key, "stored"), "patched": golden_name(mode, key, "patched"),
                 "calculated": golden_name(mode, key, "calculated"), "elements": s.numel(),
                 "changed": changed, "not_round_to_nearest": not_rne, "checked_against_plain_formula": plain}
            if scale is not None:
                tensors[golden_name(mode, key, "scale")] = scale.reshape(())
                m["scale"] = golden_name(mode, key, "scale")
                m["scale_value"] = scale.item()
                m["scale_bits"] = "0x%08x" % struct.unpack("<I", struct.pack("<f", scale.item()))[0]
                m["clamped_to_448"] = int(((c / scale).abs().to(torch.float16).float() > 448).sum())
            entry["modes"][mode] = m
            print("{:8s} {:80s} {:>5d} elements, {:>5d} changed, {:>5d} not RNE{}".format(
                mode, name, s.numel(), changed, not_rne, ", scale %.9g" % scale.item() if scale is not None else ""))
        weights.append(entry)
    cases = {
        "comfyui": "Comfy-Org/ComfyUI a125cd84b054a57729b5eecab930ca9408719832",
        "torch": torch.__version__,
        "float8": "real torch.float8_e4m3fn" if REAL_FP8 else "shim (tests/data/fp8/fp8_shim.py)",
        "checkpoint": "golden/tiny-sd1.safetensors",
        "lora": {"file": "lora/{}.safetensors".format(LORA_FILE), "strength_model": STRENGTH_MODEL,
                 "strength_clip": STRENGTH_CLIP},
        "format": "float8_e4m3fn",
        "golden": "lora/fp8/fp8_lora_golden.safetensors",
        "seed": "comfy.model_patcher.string_to_seed(comfy_key), passed to stochastic_rounding (at_load) "
                "and to set_func (scaled: ops.scaled_fp8_op.Linear.set_weight)",
        "weights": weights,
    }
    return tensors, cases


def cases_text(cases):
    return json.dumps(cases, indent=1, sort_keys=True) + "\n"


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    check = "--check" in sys.argv[2:]
    mlg.DTYPES["U8"] = (np.uint8, torch.uint8)
    mlg.NAMES[torch.uint8] = "U8"
    comfy = mlg.import_comfy(os.path.abspath(sys.argv[1]))
    import comfy.ops  # noqa: F401
    import comfy.model_patcher  # noqa: F401
    tensors, cases = compute(comfy)
    if not check:
        mlg.write_safetensors(GOLDEN, tensors, {"made_by": "tests/data/lora/fp8/make_fp8_lora_golden.py"})
        with open(CASES_JSON, "w") as f:
            f.write(cases_text(cases))
        print("wrote", GOLDEN, os.path.getsize(GOLDEN), "bytes;", len(tensors), "tensors; torch", torch.__version__)
        return
    want = mlg.read_safetensors(GOLDEN)
    bad = 0
    if sorted(want) != sorted(tensors):
        print("tensor names differ")
        bad += 1
    for name in sorted(set(want) & set(tensors)):
        a, b = want[name], tensors[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            print("MISMATCH", name, "dtype/shape", a.dtype, b.dtype, a.shape, b.shape)
            bad += 1
        elif not torch.equal(a, b):
            n = int((a != b).sum())
            extra = ""
            if a.dtype == torch.float32:
                extra = ", max |diff| %g" % (a.double() - b.double()).abs().max().item()
            print("MISMATCH", name, "%d of %d elements differ%s" % (n, a.numel(), extra))
            bad += 1
    old = json.load(open(CASES_JSON))
    for k in ("torch", "float8"):
        old.pop(k, None)
        cases.pop(k, None)
    if old != json.loads(json.dumps(cases)):
        print("cases.json differs (besides torch/float8)")
        bad += 1
    print("torch", torch.__version__, "float8", "real" if REAL_FP8 else "shim", "->",
          "ALL MATCH" if bad == 0 else "%d MISMATCHES" % bad)
    sys.exit(0 if bad == 0 else 1)


if __name__ == "__main__":
    main()
