#!/usr/bin/env python3
"""Reference data of the Flux.1 DiT graph (issue 39): ComfyUI's own Flux class
(comfy/ldm/flux/model.py, commit a125cd84) with a tiny random configuration, run on the CPU.
See README.md beside this file.

Usage: make_dit_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

Reuses make_ops_golden.py's shims for torch 1.13 (einops, stubbed imports) and its safetensors
writer. Flux.forward_orig is called directly with the patchified image tokens, the text tokens,
their position ids (txt zeros, img (0, row, column) as Flux.process_img makes them), sigma
timesteps, the pooled vector and the guidance; it runs in float32.
Writes dit_golden.safetensors: the weights under ComfyUI's names (diffusion-model layout, no
prefix) and the test data under "golden." names (latent, img, txt, ids, timesteps, y, guidance,
out); the configuration is in the metadata, with the tensor and element counts of the full-size
dev and schnell models (full_size.*).
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_ops_golden as ops  # noqa: E402

OUT = os.path.join(HERE, "dit_golden.safetensors")

CONFIG = dict(in_channels=16, out_channels=16, vec_in_dim=16, context_in_dim=24, hidden_size=32,
              mlp_ratio=4.0, num_heads=2, depth=2, depth_single_blocks=1, axes_dim=[4, 6, 6],
              theta=10000, patch_size=2, qkv_bias=True, guidance_embed=True)
BATCH, LAT_H, LAT_W, TXT = 2, 8, 6, 5  # latent 8 x 6 -> 4 x 3 = 12 image tokens


def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention's math (torch 1.13 lacks it): softmax(q k^T / sqrt(D)) v."""
    assert attn_mask is None and dropout_p == 0.0 and not is_causal
    s = scale if scale is not None else q.shape[-1] ** -0.5
    return torch.softmax(q @ k.transpose(-2, -1) * s, dim=-1) @ v


def patchify(x):
    """rearrange(x, "b c (h ph) (w pw) -> b (h w) (c ph pw)", ph=2, pw=2)."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def full_size_counts(comfy):
    """Tensor and element counts of the full-size Flux dev / schnell state dicts (ComfyUI's
    model_detection values: hidden 3072, 24 heads, 19 + 38 blocks, context 4096, vec 768), from
    the Flux class built on the meta device (no memory)."""
    counts = {}
    for name, guidance in (("dev", True), ("schnell", False)):
        cfg = dict(CONFIG, vec_in_dim=768, context_in_dim=4096, hidden_size=3072, num_heads=24,
                   depth=19, depth_single_blocks=38, axes_dim=[16, 56, 56],
                   guidance_embed=guidance)
        m = comfy.ldm.flux.model.Flux(operations=comfy.ops.disable_weight_init, device="meta",
                                      **cfg)
        sd = m.state_dict()
        counts["full_size." + name] = f"{len(sd)} tensors {sum(v.numel() for v in sd.values())}"
    return counts


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    comfy = ops.import_comfy(sys.argv[1])
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        torch.nn.functional.scaled_dot_product_attention = sdpa_math
    import comfy.ops
    import comfy.ldm.flux.model
    import comfy.ldm.modules.attention as attn
    comfy.ldm.flux.math.optimized_attention = attn.attention_basic
    g = torch.Generator().manual_seed(3939)
    model = comfy.ldm.flux.model.Flux(operations=comfy.ops.disable_weight_init, **CONFIG)
    t = {}
    with torch.no_grad():
        for name, p in sorted(model.state_dict().items()):
            if name.endswith(".scale"):  # RMSNorm scales: near 1
                w = torch.rand(p.shape, generator=g) + 0.5
            elif name.endswith(".bias"):
                w = torch.randn(p.shape, generator=g) * 0.1
            else:
                w = torch.randn(p.shape, generator=g) * (p.shape[-1] ** -0.5)
            p.copy_(w)
            t[name] = w
        latent = torch.randn(BATCH, 16, LAT_H, LAT_W, generator=g)
        img = patchify(latent)
        h_len, w_len = LAT_H // 2, LAT_W // 2
        img_ids = torch.zeros(h_len, w_len, 3)
        img_ids[:, :, 1] += torch.linspace(0, h_len - 1, steps=h_len).unsqueeze(1)
        img_ids[:, :, 2] += torch.linspace(0, w_len - 1, steps=w_len).unsqueeze(0)
        img_ids = img_ids.reshape(1, h_len * w_len, 3).repeat(BATCH, 1, 1)
        txt = torch.randn(BATCH, TXT, CONFIG["context_in_dim"], generator=g)
        txt_ids = torch.zeros(BATCH, TXT, 3)
        timesteps = torch.tensor([0.75, 0.2])
        y = torch.randn(BATCH, CONFIG["vec_in_dim"], generator=g)
        guidance = torch.tensor([3.5, 1.0])
        out = model.forward_orig(img, img_ids, txt, txt_ids, timesteps, y, guidance)
    assert out.shape == img.shape, out.shape
    t.update({"golden.latent": latent, "golden.img": img, "golden.txt": txt,
              "golden.ids": torch.cat((txt_ids[0], img_ids[0]), 0), "golden.timesteps": timesteps,
              "golden.y": y, "golden.guidance": guidance, "golden.out": out})
    meta = {"comfyui": "a125cd84", "torch": torch.__version__,
            "config": repr(CONFIG), "shape": f"batch {BATCH} latent {LAT_H}x{LAT_W} txt {TXT}"}
    meta.update(full_size_counts(comfy))
    print(meta)
    ops.write_safetensors(OUT, {k: v.contiguous() for k, v in t.items()}, meta)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes, {len(t)} tensors)")


if __name__ == "__main__":
    main()
