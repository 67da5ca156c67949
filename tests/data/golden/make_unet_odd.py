#!/usr/bin/python3
"""Golden UNet outputs at latent sizes that are not powers of two, computed with ComfyUI's own UNet.

Usage:  /usr/bin/python3 tests/data/golden/make_unet_odd.py COMFYUI_CHECKOUT [--out FILE]

Runs ComfyUI's comfy/ldm/modules/diffusionmodules/openaimodel.py UNetModel (with its SpatialTransformer /
CrossAttention from comfy/ldm/modules/attention.py and its layers from comfy/ops.py disable_weight_init) on
the CPU in float32 with the weights of tiny-sd1.safetensors / tiny-sdxl.safetensors (float16, upcast
exactly), and writes golden-unet-odd.safetensors next to this script. This file holds only glue: stubs for
the ComfyUI modules that probe the machine (comfy.model_management, comfy.cli_args), a stand-in for
einops (imported but not called on this path), a math-definition scaled_dot_product_attention for
PyTorch < 2.0, and a minimal safetensors reader/writer (no safetensors package needed).

Before writing anything it re-runs the three UNet cases of golden-unet-vae.safetensors (unet.sd1,
unet.sd1.nonsquare, unet.sdxl) from their stored inputs and checks the outputs (and the SDXL y vector
rebuilt from time_ids / text_embeds) against the stored ones; it stops if any relative error exceeds 1e-5.
See golden-unet-odd.md for the tensors.
"""
import argparse
import enum
import json
import math
import os
import struct
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- safetensors (read/write, F16/F32/I64)

_DT = {"F16": "<f2", "F32": "<f4", "I64": "<i8", "BF16": None}


def read_safetensors(path, prefix=""):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or not name.startswith(prefix):
            continue
        a, b = info["data_offsets"]
        dt = _DT[info["dtype"]]
        if dt is None:
            raise ValueError(f"{name}: dtype {info['dtype']} not supported")
        arr = np.frombuffer(data[base + a:base + b], dtype=dt).reshape(info["shape"]).copy()
        out[name[len(prefix):]] = arr
    return out


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f4")
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


# ---------------------------------------------------------------- ComfyUI import with stubs

SHIMS = []  # what was stubbed or shimmed, printed and recorded


class _StrictModule(types.ModuleType):
    """A stub module: only the listed attributes exist; anything else fails loudly when looked up."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"stub module {self.__name__} has no '{name}' (extend the stub)")


def _stub_model_management():
    mm = _StrictModule("comfy.model_management")
    # Attention backend selection in comfy/ldm/modules/attention.py: pick attention_pytorch.
    mm.xformers_enabled = lambda: False
    mm.sage_attention_enabled = lambda: False
    mm.flash_attention_enabled = lambda: False
    mm.pytorch_attention_enabled = lambda: True
    mm.force_upcast_attention_dtype = lambda: None
    mm.is_nvidia = lambda: False
    mm.OOM_EXCEPTION = torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError

    def cast_to(weight, dtype=None, device=None, non_blocking=False, copy=False, stream=None):
        # only reached when comfy_cast_weights is on, which disable_weight_init never sets
        raise AssertionError("comfy.model_management.cast_to should not be called on this path")

    mm.cast_to = cast_to
    SHIMS.append("comfy.model_management: stub module (xformers/sage/flash off, pytorch attention on, "
                 "no forced upcast, not nvidia; cast_to asserts it is unused)")
    return mm


def _stub_cli_args():
    ca = _StrictModule("comfy.cli_args")

    class PerformanceFeature(enum.Enum):
        Fp16Accumulation = "fp16_accumulation"
        Fp8MatrixMultiplication = "fp8_matrix_mult"
        CublasOps = "cublas_ops"
        AutoTune = "autotune"

    ca.PerformanceFeature = PerformanceFeature
    ca.args = types.SimpleNamespace(dont_upcast_attention=False, use_split_cross_attention=False,
                                    fast=set())
    SHIMS.append("comfy.cli_args: stub (args.dont_upcast_attention=False, use_split_cross_attention=False, "
                 "fast=set(); no argv parsing)")
    return ca


def _stub_einops():
    m = _StrictModule("einops")

    def _unused(*a, **k):
        raise AssertionError("einops is not installed; this code path was expected not to use it")

    m.rearrange = _unused
    m.repeat = _unused
    SHIMS.append("einops: stand-in module whose rearrange/repeat raise (imported by openaimodel.py, "
                 "attention.py, util.py; not called for UNetModel with SpatialTransformer)")
    return m


def _shim_sdpa():
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return

    def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        assert attn_mask is None and dropout_p == 0.0 and not is_causal
        scale = 1.0 / math.sqrt(q.shape[-1])
        w = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)
        return torch.matmul(w, v)

    torch.nn.functional.scaled_dot_product_attention = scaled_dot_product_attention
    SHIMS.append(f"torch.nn.functional.scaled_dot_product_attention (absent in torch {torch.__version__}): "
                 "softmax(q k^T / sqrt(d)) v, no mask/dropout")


def import_comfy(comfy_root):
    comfy_root = os.path.abspath(comfy_root)
    if not os.path.isfile(os.path.join(comfy_root, "comfy", "ldm", "modules", "diffusionmodules",
                                       "openaimodel.py")):
        sys.exit(f"{comfy_root} is not a ComfyUI checkout (comfy/ldm/... missing)")
    sys.path.insert(0, comfy_root)
    _shim_sdpa()
    sys.modules["comfy.model_management"] = _stub_model_management()
    sys.modules["comfy.cli_args"] = _stub_cli_args()
    try:
        import einops  # noqa: F401
    except ImportError:
        sys.modules["einops"] = _stub_einops()
    import comfy  # namespace package (ComfyUI has no comfy/__init__.py)
    comfy.model_management = sys.modules["comfy.model_management"]
    comfy.cli_args = sys.modules["comfy.cli_args"]
    import comfy.ops
    import comfy.ldm.modules.attention as attention
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel
    assert attention.optimized_attention is attention.attention_pytorch, attention.optimized_attention
    for m in (comfy.ops, attention, openaimodel):
        assert os.path.abspath(m.__file__).startswith(comfy_root), m.__file__
    return comfy.ops, openaimodel


# ---------------------------------------------------------------- models

# ComfyUI detect_unet_config on the tiny files (golden README) plus the model class extras:
# SD15 num_heads 8 / num_head_channels -1; SDXL num_heads -1 / num_head_channels 32 (64 in real SDXL).
SD1_CONFIG = dict(
    adm_in_channels=None, channel_mult=[1, 2, 2, 2], context_dim=32, image_size=32, in_channels=4,
    legacy=False, model_channels=32, num_res_blocks=[2, 2, 2, 2], out_channels=4,
    transformer_depth=[1, 1, 1, 1, 1, 1, 0, 0], transformer_depth_middle=1,
    transformer_depth_output=[1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0], use_checkpoint=False,
    use_linear_in_transformer=False, use_spatial_transformer=True, use_temporal_attention=False,
    use_temporal_resblock=False, num_heads=8, num_head_channels=-1)
SDXL_CONFIG = dict(
    adm_in_channels=80, channel_mult=[1, 2, 2], context_dim=64, image_size=32, in_channels=4,
    legacy=False, model_channels=32, num_classes="sequential", num_res_blocks=[2, 2, 2], out_channels=4,
    transformer_depth=[0, 0, 1, 1, 2, 2], transformer_depth_middle=2,
    transformer_depth_output=[0, 0, 0, 1, 1, 1, 2, 2, 2], use_checkpoint=False,
    use_linear_in_transformer=True, use_spatial_transformer=True, use_temporal_attention=False,
    use_temporal_resblock=False, num_heads=-1, num_head_channels=32)

UNET_PREFIX = "model.diffusion_model."


def build_unet(openaimodel, ops, config, ckpt_path):
    model = openaimodel.UNetModel(**config, dtype=torch.float32, device="cpu", operations=ops.disable_weight_init)
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in read_safetensors(ckpt_path, UNET_PREFIX).items()}
    own = model.state_dict()
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    if missing or unexpected:
        sys.exit(f"{ckpt_path}: key mismatch: missing {missing[:10]}, unexpected {unexpected[:10]}")
    model.load_state_dict(sd, strict=True)
    for k, v in model.state_dict().items():  # every parameter/buffer came from the file
        assert torch.equal(v, sd[k]), k
    model.eval()
    return model, len(sd)


def run_unet(model, x, t, context, y=None, dtype=torch.float32):
    cv = lambda a: torch.from_numpy(a).to(dtype)
    with torch.no_grad():
        return model(cv(x), timesteps=torch.from_numpy(t), context=cv(context),
                     y=None if y is None else cv(y), transformer_options={}).numpy()


def run_fp64(model, *inputs):
    """The same model in float64 (informational: how far float32 rounding moves the output)."""
    model.double()
    try:
        return run_unet(model, *inputs, dtype=torch.float64)
    finally:
        model.float()


def sdxl_y(openaimodel, text_embeds, time_ids):
    """comfy/model_base.py SDXL.encode_adm with Timestep(8) (the tiny model's width) instead of Timestep(256):
    cat(pooled, emb(height), emb(width), emb(crop_h), emb(crop_w), emb(target_height), emb(target_width))."""
    embedder = openaimodel.Timestep(8)
    rows = []
    for b in range(text_embeds.shape[0]):
        out = [embedder(torch.Tensor([float(v)])) for v in time_ids[b]]
        flat = torch.flatten(torch.cat(out)).unsqueeze(0)
        rows.append(torch.cat((torch.from_numpy(text_embeds[b:b + 1]), flat), dim=1))
    return torch.cat(rows).numpy().astype(np.float32)


def rel_err(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.sqrt(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-30))), float(np.abs(a - b).max())


# ---------------------------------------------------------------- cases

# (name, model, seed, x shape, timesteps); context [B, 77, ctx], SDXL text_embeds [B, 32]; all N(0, 1) like the
# existing goldens. SDXL time_ids = (H*8, W*8, 0, 0, H*8, W*8): image size from the latent, no crop, target =
# original (what ComfyUI's encode_adm gets from a plain CLIPTextEncode + KSampler at that size).
CASES = [
    ("sd1.a", "sd1", 1001, (1, 4, 10, 8), [999.0]),
    ("sd1.b", "sd1", 1002, (2, 4, 9, 13), [500.0, 20.0]),
    ("sdxl.a", "sdxl", 1003, (1, 4, 10, 8), [999.0]),
    ("sdxl.b", "sdxl", 1004, (1, 4, 11, 7), [500.0]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("comfyui", help="path of a ComfyUI checkout (the directory that contains comfy/)")
    ap.add_argument("--out", default=os.path.join(HERE, "golden-unet-odd.safetensors"))
    ap.add_argument("--golden-dir", default=HERE)
    args = ap.parse_args()

    torch.set_num_threads(1)
    ops, openaimodel = import_comfy(args.comfyui)
    print(f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")
    for s in SHIMS:
        print("shim:", s)

    gd = args.golden_dir
    models = {}
    for name, cfg, fn in (("sd1", SD1_CONFIG, "tiny-sd1.safetensors"), ("sdxl", SDXL_CONFIG, "tiny-sdxl.safetensors")):
        models[name], n = build_unet(openaimodel, ops, cfg, os.path.join(gd, fn))
        print(f"{name}: loaded {n} tensors from {fn}, strict key match")

    # Cross-check against golden-unet-vae.safetensors (made with torch 2.11 + ComfyUI a125cd84).
    g = read_safetensors(os.path.join(gd, "golden-unet-vae.safetensors"))
    y_re = sdxl_y(openaimodel, g["unet.sdxl.text_embeds"], g["unet.sdxl.time_ids"])
    checks = {"unet.sdxl.y (rebuilt via encode_adm recipe)": rel_err(y_re, g["unet.sdxl.y"])}
    for pre, m, sdxl in (("unet.sd1", "sd1", False), ("unet.sd1.nonsquare", "sd1", False), ("unet.sdxl", "sdxl", True)):
        inputs = (g[pre + ".x"], g[pre + ".timesteps"], g[pre + ".context"], g[pre + ".y"] if sdxl else None)
        out = run_unet(models[m], *inputs)
        checks[pre + ".out"] = rel_err(out, g[pre + ".out"])
        ref64 = run_fp64(models[m], *inputs)
        print(f"  {pre}.out vs float64 run: stored golden rel {rel_err(g[pre + '.out'], ref64)[0]:.3e}, "
              f"this harness (float32) rel {rel_err(out, ref64)[0]:.3e}")
    bad = False
    for k, (r, mx) in checks.items():
        print(f"cross-check {k}: rel error {r:.3e}, max abs diff {mx:.3e}")
        bad |= not r < 1e-5
    if bad:
        sys.exit("cross-check failed: the harness does not reproduce golden-unet-vae.safetensors")

    res = {}
    for name, m, seed, shape, ts in CASES:
        torch.manual_seed(seed)
        b = shape[0]
        x = torch.randn(shape, dtype=torch.float32).numpy()
        ctx_dim = 32 if m == "sd1" else 64
        context = torch.randn((b, 77, ctx_dim), dtype=torch.float32).numpy()
        t = np.array(ts, dtype=np.float32)
        assert t.shape == (b,)
        pre = "unet_odd." + name
        res[pre + ".x"] = x
        res[pre + ".t"] = t
        res[pre + ".context"] = context
        y = None
        if m == "sdxl":
            text_embeds = torch.randn((b, 32), dtype=torch.float32).numpy()
            h, w = shape[2] * 8, shape[3] * 8
            time_ids = np.array([[h, w, 0, 0, h, w]] * b, dtype=np.float32)
            y = sdxl_y(openaimodel, text_embeds, time_ids)
            res[pre + ".text_embeds"] = text_embeds
            res[pre + ".time_ids"] = time_ids
            res[pre + ".y"] = y
        out = run_unet(models[m], x, t, context, y)
        assert out.shape == shape and np.isfinite(out).all()
        res[pre + ".out"] = out
        r64 = rel_err(out, run_fp64(models[m], x, t, context, y))
        print(f"{pre}: x {list(shape)} t {ts} -> out max|.| {np.abs(out).max():.4g}; "
              f"float32 vs float64 run: rel {r64[0]:.3e}, max abs {r64[1]:.3e}")

    write_safetensors(args.out, res)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(res)} tensors)")
    # Self-check of the writer: read back.
    back = read_safetensors(args.out)
    assert all(np.array_equal(back[k], res[k]) for k in res)


if __name__ == "__main__":
    main()
