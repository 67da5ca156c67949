#!/usr/bin/env python3
"""Reference data of the 16-channel Flux.1 autoencoder (issue 39): ComfyUI's own VAE class
(comfy/sd.py VAE, commit a125cd84) on a tiny random ae.safetensors, run on the CPU in float32.
See README.md beside this file ("Flux VAE reference").

Usage: make_vae_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84.

The weights are a bare ae.safetensors (the BFL key layout: encoder.* and decoder.*, no
quant_conv / post_quant_conv) with z_channels 16 and a tiny width. VAE.__init__ picks its network
from the state dict: decoder.conv_in's 16 input channels give z_channels (latent_channels 16), no
post_quant_conv gives AutoencodingEngine with model.py's Encoder / Decoder and a
DiagonalGaussianRegularizer, and the missing encoder.down.2.downsample / decoder.up.3.upsample
give ComfyUI's three-level branch (downscale_ratio 4). ComfyUI hard-codes the width of that
branch (ch 128, ch_mult [1, 2, 4], num_res_blocks 2), so the script wraps the autoencoder module's
instantiate_from_config to build the Encoder / Decoder with the tiny ch / ch_mult /
num_res_blocks instead, checking every other parameter is ComfyUI's own; everything else (the
branch choice, load_state_dict, VAE.decode's process_output and NHWC output, VAE.encode's crop to
the downscale ratio, process_input and the regularizer's mode) is ComfyUI's code unchanged.

The weights are stored as float8_e4m3fn (to keep the file small: 1 byte per parameter). Every
value is drawn as headroom's make-model draws (Note [random init]) and rounded to the nearest
e4m3 value; ComfyUI gets the same values as float32 tensors (what loading the fp8 file in torch 2
and casting to the VAE's float32 dtype gives), so both sides compute in float32 on identical
weights. torch 1.13 has no float8 dtype: the bytes are written here by hand.

Writes tiny_flux_ae.safetensors (the VAE file) and vae_golden.safetensors (inputs and outputs,
float32; the metadata holds the full-size ae.safetensors layout, every name and shape of the
Encoder / Decoder at ComfyUI's default ddconfig with z_channels 16) beside this file.
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_ops_golden as ops  # noqa: E402
from comfy_harness import safetensors_write  # noqa: E402  (tests/data: on sys.path by ops)

AE_OUT = os.path.join(HERE, "tiny_flux_ae.safetensors")
GOLDEN_OUT = os.path.join(HERE, "vae_golden.safetensors")

# The tiny network: GroupNorm's 32 groups need every width to be a multiple of 32.
TINY = dict(ch=32, ch_mult=[1, 1, 1], num_res_blocks=1)
DECODE_LATENT = (2, 16, 5, 6)    # -> images 20 x 24
ENCODE_PIXELS = (2, 18, 22, 3)   # NHWC in [0, 1]; cropped to 16 x 20 (offsets 1, 1) -> 4 x 5
SEED = 3916


def import_comfy_sd(comfy_dir):
    """comfy.sd with its imports satisfied on torch 1.13: packages never called are stubbed."""
    ops.STUBBED_ROOTS |= {"tqdm", "av", "torchaudio", "kornia", "spandrel"}
    comfy = ops.import_comfy(comfy_dir)  # comfy_harness's einops shim stubs einops.layers too
    import comfy.sd
    return comfy


# ---------------------------------------------------------------------------------------------
# float8_e4m3fn values and bytes (sign, 4 exponent bits with bias 7, 3 mantissa bits; no
# infinities, code 0x7f is NaN).

def e4m3_table():
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append((m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=torch.float64)


def e4m3_round(x):
    """(values as float32, codes as uint8) of the nearest e4m3 value of each element of x."""
    table = e4m3_table()
    a = x.double().abs().reshape(-1)
    idx = torch.searchsorted(table, a).clamp(1, len(table) - 1)
    lo, hi = table[idx - 1], table[idx]
    idx = torch.where((a - lo) <= (hi - a), idx - 1, idx)
    sign = (x.reshape(-1) < 0) & (idx > 0)
    vals = table[idx] * torch.where(sign, -1.0, 1.0).double()
    codes = idx.to(torch.int64) | (sign.to(torch.int64) << 7)
    return vals.float().reshape(x.shape), codes.to(torch.uint8).reshape(x.shape)


def write_e4m3_safetensors(path, codes, metadata):
    safetensors_write(path, ((name, "F8_E4M3", codes[name].shape,
                              codes[name].contiguous().numpy().tobytes())
                             for name in sorted(codes)), metadata)


# ---------------------------------------------------------------------------------------------

def tiny_state_dict(comfy, g):
    """Random weights in ae.safetensors' layout: the names and shapes of model.py's Encoder and
    Decoder at the tiny width (z_channels 16, double_z), drawn as Note [random init] (matrices
    and kernels N(0, 1/fan_in), norm scales 1 + 0.1 N(0, 1), biases 0.1 N(0, 1)), rounded to
    e4m3."""
    import comfy.ldm.modules.diffusionmodules.model as ae_model
    cfg = dict(double_z=True, z_channels=16, resolution=256, in_channels=3, out_ch=3,
               attn_resolutions=[], dropout=0.0, **TINY)
    shapes = {}
    for prefix, cls in (("encoder.", ae_model.Encoder), ("decoder.", ae_model.Decoder)):
        for k, v in cls(**cfg).state_dict().items():
            shapes[prefix + k] = v.shape
    vals, codes = {}, {}
    for name in sorted(shapes):
        s = shapes[name]
        if len(s) == 1 and name.endswith(".weight"):
            w = 1.0 + 0.1 * torch.randn(s, generator=g)
        elif len(s) == 1:
            w = 0.1 * torch.randn(s, generator=g)
        else:
            fan_in = 1
            for d in s[1:]:
                fan_in *= d
            w = torch.randn(s, generator=g) * fan_in ** -0.5
        vals[name], codes[name] = e4m3_round(w)
    return vals, codes


def full_size_layout():
    """ae.safetensors' names and shapes: model.py's Encoder / Decoder with ComfyUI's default
    ddconfig (VAE.__init__) and z_channels 16, as JSON {name: shape}."""
    import comfy.ldm.modules.diffusionmodules.model as ae_model
    cfg = dict(double_z=True, z_channels=16, resolution=256, in_channels=3, out_ch=3, ch=128,
               ch_mult=[1, 2, 4, 4], num_res_blocks=2, attn_resolutions=[], dropout=0.0)
    layout = {}
    for prefix, cls in (("encoder.", ae_model.Encoder), ("decoder.", ae_model.Decoder)):
        for k, v in cls(**cfg).state_dict().items():
            layout[prefix + k] = list(v.shape)
    return json.dumps(layout, sort_keys=True, separators=(",", ":"))


def tiny_instantiate(original, calls):
    """instantiate_from_config, but model.py's Encoder / Decoder get the tiny width; every other
    parameter must be the one ComfyUI chose from the state dict."""
    def make(config):
        target = config.get("target", "")
        if target.endswith("diffusionmodules.model.Encoder") or \
                target.endswith("diffusionmodules.model.Decoder"):
            p = dict(config["params"])
            chosen = {k: p[k] for k in ("ch", "ch_mult", "num_res_blocks")}
            assert chosen == {"ch": 128, "ch_mult": [1, 2, 4], "num_res_blocks": 2}, chosen
            assert p["z_channels"] == 16 and p["double_z"] and p["in_channels"] == 3 and \
                p["out_ch"] == 3 and p["attn_resolutions"] == [], p
            p.update(TINY)
            calls.append(target)
            config = dict(config, params=p)
        return original(config)
    return make


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    comfy = import_comfy_sd(sys.argv[1])
    import comfy.ldm.models.autoencoder as autoencoder
    import comfy.model_management as mm
    g = torch.Generator().manual_seed(SEED)
    vals, codes = tiny_state_dict(comfy, g)

    calls = []
    autoencoder.instantiate_from_config = tiny_instantiate(autoencoder.instantiate_from_config,
                                                           calls)
    vae = comfy.sd.VAE(sd=dict(vals), dtype=torch.float32)
    assert sorted(calls) == ["comfy.ldm.modules.diffusionmodules.model.Decoder",
                             "comfy.ldm.modules.diffusionmodules.model.Encoder"], calls
    fsm = vae.first_stage_model
    assert type(fsm) is autoencoder.AutoencodingEngine, type(fsm)
    assert not hasattr(fsm, "quant_conv") and not hasattr(fsm, "post_quant_conv")
    assert vae.latent_channels == 16 and vae.downscale_ratio == 4 and vae.upscale_ratio == 4
    assert sorted(fsm.state_dict()) == sorted(vals), "the state dict must fill the model exactly"
    for k, v in fsm.state_dict().items():
        assert torch.equal(v, vals[k]), k
    print("VAE:", type(fsm).__name__, "latent_channels", vae.latent_channels, "downscale",
          vae.downscale_ratio, "attention", mm.vae_device(), fsm.decoder.mid.attn_1.optimized_attention.__name__)

    latent = torch.randn(DECODE_LATENT, generator=g)
    pixels = torch.rand(ENCODE_PIXELS, generator=g)
    with torch.no_grad():
        raw = fsm.decode(latent)                 # the decoder's output, about [-1, 1]
        image = vae.decode(latent)               # VAEDecode: process_output, NHWC
        encoded = vae.encode(pixels)             # VAEEncode: crop, process_input, encode, mode
        cropped = vae.vae_encode_crop_pixels(pixels).movedim(-1, 1)
        moments = fsm.encode(vae.process_input(cropped), unregularized=True)[0]
    assert image.shape == (2, 20, 24, 3) and encoded.shape == (2, 16, 4, 5), \
        (image.shape, encoded.shape)
    assert torch.equal(encoded, moments[:, :16]), "VAEEncode returns the moments' mean"
    t = {"decode.latent": latent, "decode.raw": raw, "decode.image": image,
         "encode.pixels": pixels, "encode.latent": encoded, "encode.moments": moments}
    meta = {"comfyui": "a125cd84", "torch": torch.__version__, "seed": str(SEED),
            "config": repr(dict(TINY, z_channels=16, double_z=True)),
            "full_size.layout": full_size_layout()}
    write_e4m3_safetensors(AE_OUT, codes, {"format": "pt"})
    ops.write_safetensors(GOLDEN_OUT, {k: v.contiguous().float() for k, v in t.items()}, meta)
    n = sum(v.numel() for v in vals.values())
    for path in (AE_OUT, GOLDEN_OUT):
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    print(f"{len(vals)} tensors, {n} parameters; clamped pixels "
          f"{float(((image == 0) | (image == 1)).float().mean()):.3f}")
    del vae  # while the modules its ModelPatcher's __del__ reads are still there


if __name__ == "__main__":
    main()
