#!/usr/bin/env python3
"""Reference data of the RMS_NORM and ROPE ops (issue 39), made with ComfyUI's own functions on
small random inputs. See README.md beside this file.

Usage: make_ops_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

Runs on the CPU with torch 1.13, which lacks two things ComfyUI's code imports:
- einops: rope() calls rearrange(out, "b n d (i j) -> b n d i j", i=2, j=2) once;
  ../comfy_harness.py's einops_shim does that pattern (a reshape of the last dim into 2 x 2),
  those of Flux's patchify / unpatchify (make_forward_golden.py) and refuses any other;
- transformers / tokenizers / torchvision / safetensors / sentencepiece: imported at the top of
  modules on the way, never called by the functions used here; stubbed (comfy_harness's
  stub_packages).
torch 1.13 has no torch.nn.functional.rms_norm, so comfy.rmsnorm.rms_norm takes its explicit
formula x * rsqrt(mean(x^2) + eps) * weight; in f32 that is F.rms_norm's arithmetic (upcast is a
no-op, the same two products), so the golden is what ComfyUI computes on torch 2 too (the script
also runs a stand-in with F.rms_norm's composite steps through the other branch and checks the two
agree within 2 f32 ulp).
Writes ops_golden.safetensors (f32 and i64 tensors) beside this file.
"""

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/data: comfy_harness
from comfy_harness import einops_shim, safetensors_write, stub_packages  # noqa: E402

OUT = os.path.join(HERE, "ops_golden.safetensors")

# ---------------------------------------------------------------------------------------------
# Imports ComfyUI needs that torch 1.13's environment lacks.

STUBBED_ROOTS = {"safetensors", "torchvision", "transformers", "tokenizers", "sentencepiece"}


def import_comfy(comfy_dir):
    einops_shim()
    stub_packages(STUBBED_ROOTS)
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.rmsnorm
    import comfy.ldm.common_dit
    import comfy.ldm.flux.layers
    import comfy.ldm.flux.math
    import comfy.text_encoders.t5
    import comfy.text_encoders.llama
    return comfy


# ---------------------------------------------------------------------------------------------
# safetensors writing (8-byte little-endian header length, JSON header, data).

NAMES = {torch.float32: "F32", torch.int64: "I64"}


def write_safetensors(path, tensors, metadata):
    safetensors_write(path, ((name, NAMES[tensors[name].dtype], tensors[name].shape,
                              tensors[name].contiguous().numpy().tobytes())
                             for name in sorted(tensors)), metadata)


# ---------------------------------------------------------------------------------------------


def rms_norm_composite(x, normalized_shape, weight=None, eps=None):
    """torch's rms_norm_composite step by step (upcast, pow, mean, add eps, rsqrt, two products,
    one rounding back), as a stand-in for F.rms_norm on torch 1.13."""
    up = x.float()
    r = torch.rsqrt(up.pow(2).mean(-1, keepdim=True).add_(eps))
    y = up.mul(r)
    if weight is not None:
        y = y.mul(weight)
    return y.type_as(x)


def ulp_close(a, b, ulps):
    """|a - b| <= ulps * spacing(max(|a|, |b|)) elementwise (f32)."""
    a64, b64 = a.double(), b.double()
    spacing = torch.from_numpy(np.spacing(np.maximum(abs(a.numpy()), abs(b.numpy())))).double()
    return bool(((a64 - b64).abs() <= ulps * spacing).all())


def make_rms(comfy, g, t):
    flux_layers = comfy.ldm.flux.layers
    # Flux's QK norm: RMSNorm(head_dim) on q [B, H, L, D] (eps 1e-6).
    q = torch.randn(1, 2, 7, 128, generator=g) * 2.0 + 0.5
    norm = flux_layers.RMSNorm(128)
    with torch.no_grad():
        norm.scale.copy_(torch.rand(128, generator=g) + 0.5)
        t["rms_qk.x"], t["rms_qk.weight"], t["rms_qk.out"] = q, norm.scale.detach().clone(), norm(q)
    # T5's layer norm on [B, N, C] (eps 1e-6, weight * (x * rsqrt(...))).
    x = torch.randn(1, 5, 64, generator=g) * 3.0 - 1.0
    ln = comfy.text_encoders.t5.T5LayerNorm(64)
    with torch.no_grad():
        ln.weight.copy_(torch.rand(64, generator=g) + 0.5)
        t["rms_t5.x"], t["rms_t5.weight"], t["rms_t5.out"] = x, ln.weight.detach().clone(), ln(x)
    # No weight, ComfyUI's default eps (1e-6).
    x = torch.randn(3, 48, generator=g)
    t["rms_noweight.x"], t["rms_noweight.out"] = x, comfy.ldm.common_dit.rms_norm(x)

    # The F.rms_norm branch (torch >= 2.4) gives the same f32 results.
    assert comfy.rmsnorm.rms_norm_torch is None, "expected torch 1.13 (no F.rms_norm)"
    comfy.rmsnorm.rms_norm_torch = rms_norm_composite
    try:
        assert ulp_close(comfy.rmsnorm.rms_norm(t["rms_qk.x"], t["rms_qk.weight"], 1e-6),
                         t["rms_qk.out"], 2)
        assert ulp_close(comfy.rmsnorm.rms_norm(t["rms_noweight.x"]), t["rms_noweight.out"], 2)
    finally:
        comfy.rmsnorm.rms_norm_torch = None


def flux_ids():
    """Position ids as comfy/ldm/flux/model.py builds them (txt_ids zeros, then img_ids
    (0, row, column) from process_img for a 3 x 4 grid of 2x2 patches), plus rows far from the
    origin (a 2048^2 image reaches row/column 127; Kontext's reference latents use index 1)."""
    txt = torch.zeros(1, 3, 3)
    h_len, w_len = 3, 4
    img = torch.zeros(h_len, w_len, 3)
    img[:, :, 1] = img[:, :, 1] + torch.linspace(0, h_len - 1, steps=h_len).unsqueeze(1)
    img[:, :, 2] = img[:, :, 2] + torch.linspace(0, w_len - 1, steps=w_len).unsqueeze(0)
    img = img.reshape(1, h_len * w_len, 3)
    far = torch.tensor([[[0.0, 127.0, 127.0], [1.0, 64.0, 3.0], [1.0, 95.0, 100.0],
                         [0.0, 33.0, 126.0], [1.0, 0.0, 0.0]]])
    return torch.cat((txt, img, far), dim=1)


def make_flux_rope(comfy, g, t):
    ids = flux_ids()
    embed = comfy.ldm.flux.layers.EmbedND(dim=128, theta=10000, axes_dim=[16, 56, 56])
    pe = embed(ids)  # [1, 1, N, 64, 2, 2]
    assert pe.dtype == torch.float32 and tuple(pe.shape) == (1, 1, ids.shape[1], 64, 2, 2)
    # rope()'s matrices are [[cos, -sin], [sin, cos]].
    assert torch.equal(pe[..., 0, 1], -pe[..., 1, 0]) and torch.equal(pe[..., 0, 0], pe[..., 1, 1])
    q = torch.randn(1, 2, ids.shape[1], 128, generator=g)
    k = torch.randn(1, 2, ids.shape[1], 128, generator=g) * 3.0
    v = torch.randn(1, 2, ids.shape[1], 128, generator=g)
    # Flux's blocks rotate q and k inside comfy.ldm.flux.math.attention (products, then their sum);
    # its optimized_attention is replaced by one that hands back the rotated q and k.
    flux_math = comfy.ldm.flux.math
    seen = {}

    def capture(q, k, v, heads, **kw):
        seen["q"], seen["k"] = q, k
        return v

    kept = flux_math.optimized_attention
    flux_math.optimized_attention = capture
    try:
        flux_math.attention(q, k, v, pe=pe)
    finally:
        flux_math.optimized_attention = kept
    # apply_rope (Wan, HiDream; addcmul_ fuses the second product into an FMA).
    qa, ka = flux_math.apply_rope(q, k, pe)
    t["flux_rope.ids"], t["flux_rope.pe"] = ids, pe
    t["flux_rope.q"], t["flux_rope.k"] = q, k
    t["flux_rope.q_out"], t["flux_rope.k_out"] = seen["q"], seen["k"]
    t["flux_rope.q_apply_rope"], t["flux_rope.k_apply_rope"] = qa, ka


def make_llama_rope(comfy, g, t):
    llama = comfy.text_encoders.llama
    n, heads, d, theta = 9, 2, 32, 1000000.0  # Qwen3's theta
    position_ids = torch.arange(0, n).unsqueeze(0)
    cos, sin = llama.precompute_freqs_cis(d, position_ids, theta)  # [1, 1, N, D] each
    q = torch.randn(1, heads, n, d, generator=g)
    k = torch.randn(1, heads, n, d, generator=g) * 2.0
    qo, ko = llama.apply_rope(q, k, (cos, sin))
    t["llama_rope.positions"] = position_ids
    t["llama_rope.cos"], t["llama_rope.sin"] = cos.contiguous(), sin.contiguous()
    t["llama_rope.q"], t["llama_rope.k"], t["llama_rope.q_out"], t["llama_rope.k_out"] = q, k, qo, ko


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    comfy = import_comfy(sys.argv[1])
    g = torch.Generator().manual_seed(39)
    t = {}
    with torch.no_grad():
        make_rms(comfy, g, t)
        make_flux_rope(comfy, g, t)
        make_llama_rope(comfy, g, t)
    for name, x in t.items():
        assert x.dtype in NAMES, name
    meta = {"comfyui": "a125cd84", "torch": torch.__version__,
            "llama_rope.theta": "1000000.0", "flux_rope.theta": "10000",
            "flux_rope.axes_dim": "16,56,56"}
    write_safetensors(OUT, t, meta)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes, {len(t)} tensors)")


if __name__ == "__main__":
    main()
