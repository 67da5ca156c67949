#!/usr/bin/env python3
"""Reference data of the Flux DiT as a diffusion-model component (issue 39): ComfyUI's own
Flux._forward (comfy/ldm/flux/model.py, commit a125cd84) on the tiny random DiT of
dit_golden.safetensors, with a latent of odd height and width. See README.md beside this file.

Usage: make_forward_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

_forward is what BaseModel._apply_model calls: it pads the latent to the patch size
(comfy.ldm.common_dit.pad_to_patch_size, circular), patchifies it, builds img_ids / txt_ids,
runs forward_orig and crops the output back. The weights are rebuilt exactly as
make_dit_golden.py draws them (same generator, seed and order) and checked equal to the ones
stored in dit_golden.safetensors, so the test loads them from there. Shims as in
make_dit_golden.py (../comfy_harness.py's einops shim writes out the patterns _forward uses with
reshape / permute) and F.scaled_dot_product_attention's math. Runs in float32 on the CPU.
Writes forward_golden.safetensors (f32): fwd.latent [2, 16, 7, 5], fwd.context [2, 3, 24],
fwd.y [2, 16], fwd.timesteps [2], fwd.guidance [2], fwd.out (guidance given) and
fwd.out_no_guidance (guidance=None: the embedding skipped, as for FluxDisableGuidance).
"""

import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_dit_golden as dit  # noqa: E402
import make_ops_golden as ops  # noqa: E402

OUT = os.path.join(HERE, "forward_golden.safetensors")
BATCH, LAT_H, LAT_W, TXT = 2, 7, 5, 3  # odd sizes: padded to 8 x 6 -> 4 x 3 tokens


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=np.float32).copy()).reshape(
            e["shape"])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    comfy = ops.import_comfy(sys.argv[1])  # with comfy_harness's einops shim: _forward's patterns
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        torch.nn.functional.scaled_dot_product_attention = dit.sdpa_math
    import comfy.ops
    import comfy.ldm.flux.model
    import comfy.ldm.modules.attention as attn
    comfy.ldm.flux.math.optimized_attention = attn.attention_basic
    g = torch.Generator().manual_seed(3939)
    model = comfy.ldm.flux.model.Flux(operations=comfy.ops.disable_weight_init, **dit.CONFIG)
    stored = read_safetensors(os.path.join(HERE, "dit_golden.safetensors"))
    t = {}
    with torch.no_grad():
        for name, p in sorted(model.state_dict().items()):  # make_dit_golden.py's draws
            if name.endswith(".scale"):
                w = torch.rand(p.shape, generator=g) + 0.5
            elif name.endswith(".bias"):
                w = torch.randn(p.shape, generator=g) * 0.1
            else:
                w = torch.randn(p.shape, generator=g) * (p.shape[-1] ** -0.5)
            assert torch.equal(w, stored[name]), name
            p.copy_(w)
        g = torch.Generator().manual_seed(3940)
        latent = torch.randn(BATCH, 16, LAT_H, LAT_W, generator=g)
        context = torch.randn(BATCH, TXT, dit.CONFIG["context_in_dim"], generator=g)
        y = torch.randn(BATCH, dit.CONFIG["vec_in_dim"], generator=g)
        timesteps = torch.tensor([0.6, 0.3])
        guidance = torch.tensor([4.0, 2.5])
        out = model._forward(latent, timesteps, context, y=y, guidance=guidance,
                             transformer_options={})
        out_ng = model._forward(latent, timesteps, context, y=y, guidance=None,
                                transformer_options={})
    assert out.shape == latent.shape, out.shape
    t.update({"fwd.latent": latent, "fwd.context": context, "fwd.y": y,
              "fwd.timesteps": timesteps, "fwd.guidance": guidance, "fwd.out": out,
              "fwd.out_no_guidance": out_ng})
    meta = {"comfyui": "a125cd84", "torch": torch.__version__, "weights": "dit_golden.safetensors",
            "shape": f"batch {BATCH} latent {LAT_H}x{LAT_W} txt {TXT}"}
    print(meta)
    ops.write_safetensors(OUT, {k: v.contiguous() for k, v in t.items()}, meta)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes, {len(t)} tensors)")


if __name__ == "__main__":
    main()
