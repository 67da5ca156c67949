#!/usr/bin/python3
"""Reference tensors for the node tests (tests/workflow/resample_test.cpp,
nodes_latent_test.cpp, nodes_image_test.cpp), computed with ComfyUI's own functions.

Usage: /usr/bin/python3 make_node_refs.py <ComfyUI checkout> <tiny-sd1.safetensors> <out>

Needs torch, numpy and PIL. Imports comfy.utils (common_upscale, bislerp, lanczos,
tiled_scale) and comfy.ldm.modules.diffusionmodules.model.Decoder from the checkout; the
few pieces of ComfyUI that cannot be imported without its whole dependency tree (nodes.py's
size rules, VAE.decode_tiled_'s three-tiling average) are restated below in a line or two
each, with the source they follow named. See README.md for the tensor list.
"""
import json
import struct
import sys
import types

import numpy as np
import torch


def import_comfy(root):
    sys.path.insert(0, root)
    # Modules comfy.utils imports at top level but the functions used here never call.
    for name in ["safetensors", "safetensors.torch", "einops"]:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["einops"].rearrange = None
    import comfy.cli_args
    comfy.cli_args.args.cpu = True  # model_management must not look for CUDA
    import comfy.utils
    import comfy.ldm.modules.diffusionmodules.model as vae_model
    return comfy.utils, vae_model


def read_safetensors(path, prefix):
    dtypes = {"F32": np.float32, "F16": np.float16, "BF16": None}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in header.items():
            if k == "__metadata__" or not k.startswith(prefix):
                continue
            a, b = v["data_offsets"]
            f.seek(base + a)
            arr = np.frombuffer(f.read(b - a), dtype=dtypes[v["dtype"]]).reshape(v["shape"])
            out[k[len(prefix):]] = torch.from_numpy(arr.astype(np.float32))
        return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def tiny_sd1_vae(vae_model, ckpt):
    sd = read_safetensors(ckpt, "first_stage_model.")
    # ComfyUI's SD VAE: post_quant_conv then Decoder (comfy/ldm/models/autoencoder.py), with
    # the tiny checkpoint's sizes (ch 32, ch_mult 1,2,2,2; see tests/data/golden/README.md).
    dec = vae_model.Decoder(ch=32, out_ch=3, ch_mult=[1, 2, 2, 2], num_res_blocks=2,
                            attn_resolutions=[], in_channels=3, resolution=256, z_channels=4,
                            dropout=0.0)
    dec.load_state_dict({k[len("decoder."):]: v for k, v in sd.items() if k.startswith("decoder.")})
    pq = torch.nn.Conv2d(4, 4, 1)
    pq.load_state_dict({"weight": sd["post_quant_conv.weight"], "bias": sd["post_quant_conv.bias"]})
    return lambda z: dec(pq(z)).float()


def main():
    comfy_root, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    cu, vae_model = import_comfy(comfy_root)
    torch.manual_seed(20251130)
    t = {}
    latent = torch.randn(1, 4, 8, 10)
    image = torch.rand(1, 16, 20, 3)
    t["in.latent"] = latent
    t["in.image"] = image

    # comfy.utils.common_upscale on the latent: (width, height, crop) cases. The centre-crop
    # cases trim 2 rows (round(1.5) = 2, half to even) and 2 columns.
    cases = {"up": (14, 11, "disabled"), "down": (6, 5, "disabled"),
             "crop_rows": (16, 8, "center"), "crop_cols": (8, 12, "center")}
    for m in ["nearest-exact", "bilinear", "area", "bicubic", "bislerp"]:
        for c, (w, h, crop) in cases.items():
            t[f"upscale.{m}.{c}"] = cu.common_upscale(latent, w, h, m, crop)

    # Node-level results. nodes.py cannot be imported here (it pulls in comfy.sd and its
    # dependencies), so its size rules are restated with the line they follow.
    for m in ["nearest-exact", "bilinear", "area", "bicubic", "bislerp"]:
        # LatentUpscale(width=0, height=88): width = max(64, round(w * height / h)) -> 110
        wpx = max(64, round(latent.shape[-1] * 88 / latent.shape[-2]))
        t[f"latent_upscale.{m}.w0_h88"] = cu.common_upscale(latent, wpx // 8, 88 // 8, m, "disabled")
        # LatentUpscaleBy: width = round(w * scale_by), height = round(h * scale_by)
        for s in [1.5, 0.75]:
            w, h = round(latent.shape[-1] * s), round(latent.shape[-2] * s)
            t[f"latent_upscale_by.{m}.{s}"] = cu.common_upscale(latent, w, h, m, "disabled")
    for m in ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]:
        # ImageScale: samples = image.movedim(-1, 1); common_upscale; movedim(1, -1)
        x = image.movedim(-1, 1)
        t[f"image_scale.{m}.27x21"] = cu.common_upscale(x, 27, 21, m, "disabled").movedim(1, -1)
        t[f"image_scale.{m}.13x9"] = cu.common_upscale(x, 13, 9, m, "disabled").movedim(1, -1)
        t[f"image_scale.{m}.24x12c"] = cu.common_upscale(x, 24, 12, m, "center").movedim(1, -1)
        # ImageScale(width=0, height=12): width = max(1, round(w * height / h)) -> 15
        t[f"image_scale.{m}.w0_h12"] = cu.common_upscale(x, 15, 12, m, "disabled").movedim(1, -1)

    # VAEDecode / VAEDecodeTiled on the tiny SD1 VAE. process_output (comfy/sd.py):
    # clamp((x + 1) / 2, 0, 1); decode_tiled_ (comfy/sd.py) averages three tiled_scale runs with
    # tiles (x/2, y*2), (x*2, y/2), (x, y); VAEDecodeTiled passes tile_size // 8, overlap // 8.
    decode = tiny_sd1_vae(vae_model, ckpt)
    z = torch.randn(1, 4, 9, 10)
    t["in.tiled_latent"] = z
    post = lambda x: torch.clamp((x + 1.0) / 2.0, min=0.0, max=1.0).movedim(1, -1)
    with torch.no_grad():
        t["vae_decode"] = post(decode(z))
        for tile_px, overlap_px in [(64, 16), (128, 32)]:
            tx, ov = tile_px // 8, overlap_px // 8
            if tile_px < overlap_px * 4:  # VAEDecodeTiled.decode
                ov = tile_px // 4 // 8
            runs = [cu.tiled_scale(z, decode, tx // 2, tx * 2, ov, upscale_amount=8),
                    cu.tiled_scale(z, decode, tx * 2, tx // 2, ov, upscale_amount=8),
                    cu.tiled_scale(z, decode, tx, tx, ov, upscale_amount=8)]
            t[f"vae_decode_tiled.{tile_px}_{overlap_px}"] = post((runs[0] + runs[1] + runs[2]) / 3.0)

    write_safetensors(out, t)
    print(f"wrote {len(t)} tensors to {out}")


if __name__ == "__main__":
    main()
