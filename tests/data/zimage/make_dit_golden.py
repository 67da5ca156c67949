#!/usr/bin/python3
"""Reference data of the Z-Image DiT graph (issue 40 item 3): diffusers' ZImageTransformer2DModel
(src/diffusers/models/transformers/transformer_z_image.py, ../shared/peers/diffusers) with a tiny
random configuration, run on the CPU in float32. See README.md beside this file.

Usage: make_dit_golden.py [--diffusers DIR] [--out FILE]
  DIR: a diffusers checkout (default /work/shared/peers/diffusers); only the one model file is
  loaded, its package imports replaced by the small stand-ins below (they restate diffusers'
  RMSNorm, Attention's projections and the SDPA dispatch; nothing else of diffusers runs).

Writes dit_golden.safetensors: the weights under ComfyUI's key names (the inverse of diffusers'
convert_z_image_transformer_checkpoint_to_diffusers, loaders/single_file_utils.py) and, per case,
"golden.<case>.x" [B, 16, H, W] (the latent), ".sigma" [B], ".context" [B, L, cap_feat_dim] and
".out" [B, 16, H, W]: ComfyUI's model output for sigma, i.e. -model(x, 1 - sigma, context) (the
diffusers pipeline passes t = (1000 - timestep) / 1000 = 1 - sigma and negates the prediction).
The metadata holds the configuration, the cases and "full_size.turbo": the tensor and element
counts of the full-size model (Z-Image Turbo's config) in ComfyUI's layout.
"""

import argparse
import importlib.util
import json
import math
import os
import struct
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=32, n_layers=2,
              n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True,
              cap_feat_dim=24, rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 4, 4],
              axes_lens=[256, 64, 64])
T_MID = 32  # the timestep MLP's hidden width (diffusers fixes 1024; shrunk to keep the file small)

# name: (batch, caption tokens, latent H, latent W, sigmas). Caption and image token counts are
# not multiples of 32, so both get pad tokens (SEQ_MULTI_OF).
CASES = {
    "a": (1, 7, 6, 10, [0.7]),
    "b": (2, 37, 12, 14, [0.25, 0.9]),
}


# ---------------------------------------------------------------- stand-ins for diffusers imports

class RMSNorm(nn.Module):
    """diffusers.models.normalization.RMSNorm (elementwise affine, no bias), its non-NPU path."""

    def __init__(self, dim, eps, elementwise_affine=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


class Attention(nn.Module):
    """The parts of diffusers' Attention the Z-Image block uses: to_q/to_k/to_v (no bias),
    norm_q/norm_k (qk_norm "rms_norm": RMSNorm over the head dim), to_out = [Linear, Dropout],
    and forward handing everything to the processor."""

    def __init__(self, query_dim, cross_attention_dim, dim_head, heads, qk_norm, eps, bias,
                 out_bias, processor):
        super().__init__()
        assert qk_norm == "rms_norm" and cross_attention_dim is None
        inner = dim_head * heads
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner, bias=bias)
        self.to_k = nn.Linear(query_dim, inner, bias=bias)
        self.to_v = nn.Linear(query_dim, inner, bias=bias)
        self.norm_q = RMSNorm(dim_head, eps=eps)
        self.norm_k = RMSNorm(dim_head, eps=eps)
        self.to_out = nn.ModuleList([nn.Linear(inner, query_dim, bias=out_bias), nn.Dropout(0.0)])
        self.processor = processor

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, **kw):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask, **kw)


def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention's math (torch 1.13 lacks it): [B, H, S, D] inputs, a bool
    mask keeps True positions."""
    assert dropout_p == 0.0 and not is_causal
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def dispatch_attention_fn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                          backend=None, parallel_config=None):
    """diffusers' attention dispatch, native backend: [B, S, H, D] in and out."""
    out = sdpa_math(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                    attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)
    return out.transpose(1, 2)


def load_model_module(diffusers_dir):
    F.scaled_dot_product_attention = sdpa_math  # the processor's constructor checks for it

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__path__ = []
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    def empty(name):
        return type(name, (), {})

    class _Output:
        def __init__(self, sample):
            self.sample = sample

    module("diffusers")
    module("diffusers.configuration_utils", ConfigMixin=empty("ConfigMixin"), register_to_config=lambda f: f)
    module("diffusers.loaders", FromOriginalModelMixin=empty("FromOriginalModelMixin"),
           PeftAdapterMixin=empty("PeftAdapterMixin"))
    module("diffusers.models")
    module("diffusers.models.attention_processor", Attention=Attention)
    module("diffusers.models.modeling_utils", ModelMixin=nn.Module)
    module("diffusers.models.normalization", RMSNorm=RMSNorm)
    module("diffusers.utils")
    module("diffusers.utils.torch_utils", maybe_allow_in_graph=lambda c: c)
    module("diffusers.models.transformers")
    module("diffusers.models.attention_dispatch", dispatch_attention_fn=dispatch_attention_fn)
    module("diffusers.models.modeling_outputs", Transformer2DModelOutput=_Output)
    name = "diffusers.models.transformers.transformer_z_image"
    path = os.path.join(diffusers_dir, "src/diffusers/models/transformers/transformer_z_image.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.torch = _TorchWithDeviceContext()
    # torch 1.13 indexes only with int64: the int32 position ids as int64, same rows.
    call = mod.RopeEmbedder.__call__
    mod.RopeEmbedder.__call__ = lambda self, ids: call(self, ids.long())
    return mod


class _DeviceContext:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _TorchWithDeviceContext(types.ModuleType):
    """torch for the model file, where `with torch.device("cpu"):` (torch 2) is a no-op: every
    tensor here is on the CPU already."""

    def __init__(self):
        super().__init__("torch")

    device = _DeviceContext

    def __getattr__(self, name):
        return getattr(torch, name)


# ---------------------------------------------------------------- weights

def randomize(model, gen):
    """Every parameter random (the defaults leave pad tokens 0 and norms 1, which would hide
    errors): matrices ~ N(0, 1/fan_in), vectors ~ N(0, 0.1^2) (norm weights 1 + that)."""
    for name, p in model.named_parameters():
        if p.dim() == 2 and "pad_token" not in name:
            p.data = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
        elif "norm" in name or name.startswith("cap_embedder.0."):
            p.data = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
        elif "pad_token" in name:
            p.data = torch.randn(p.shape, generator=gen)
        else:
            p.data = 0.1 * torch.randn(p.shape, generator=gen)


def comfy_state_dict(model):
    """diffusers names -> ComfyUI's (z_image_turbo_bf16.safetensors): the inverse of
    convert_z_image_transformer_checkpoint_to_diffusers (Note [z-image key layout] in
    src/models/zimage/zimage_config.h)."""
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    out = {}
    for k in list(sd):
        if ".attention.to_q.weight" in k:
            base = k[: -len(".to_q.weight")]
            out[base + ".qkv.weight"] = torch.cat(
                [sd[base + ".to_q.weight"], sd[base + ".to_k.weight"], sd[base + ".to_v.weight"]])
    for k, v in sd.items():
        if any(s in k for s in (".to_q.", ".to_k.", ".to_v.")):
            continue
        n = k.replace("all_final_layer.2-1.", "final_layer.")
        n = n.replace("all_x_embedder.2-1.", "x_embedder.")
        n = n.replace(".attention.to_out.0.", ".attention.out.")
        n = n.replace(".attention.norm_q.", ".attention.q_norm.")
        n = n.replace(".attention.norm_k.", ".attention.k_norm.")
        out[n] = v
    return out


def full_size_counts(zi):
    """Tensor and element counts of the full-size model's state dict in ComfyUI's layout
    (diffusers' defaults are Z-Image Turbo's config), built with every Linear on the meta device
    (no memory): "N tensors M"."""
    orig = nn.Linear.__init__

    def meta_init(self, *a, **k):
        k.setdefault("device", "meta")
        orig(self, *a, **k)

    nn.Linear.__init__ = meta_init
    try:
        sd = comfy_state_dict(zi.ZImageTransformer2DModel())
    finally:
        nn.Linear.__init__ = orig
    return f"{len(sd)} tensors {sum(v.numel() for v in sd.values())}"


def save_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].to(torch.float32).contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffusers", default="/work/shared/peers/diffusers")
    ap.add_argument("--out", default=os.path.join(HERE, "dit_golden.safetensors"))
    args = ap.parse_args()

    zi = load_model_module(args.diffusers)
    torch.manual_seed(0)
    model = zi.ZImageTransformer2DModel(**CONFIG)
    model.t_embedder = zi.TimestepEmbedder(min(CONFIG["dim"], zi.ADALN_EMBED_DIM), mid_size=T_MID)
    gen = torch.Generator().manual_seed(40)
    randomize(model, gen)
    model.eval()

    tensors = comfy_state_dict(model)
    cases = {}
    with torch.no_grad():
        for name, (batch, cap_len, h, w, sigmas) in CASES.items():
            x = torch.randn((batch, CONFIG["in_channels"], h, w), generator=gen)
            ctx = torch.randn((batch, cap_len, CONFIG["cap_feat_dim"]), generator=gen)
            sigma = torch.tensor(sigmas, dtype=torch.float32)
            # The pipeline's call: a list of [C, F=1, H, W] latents and of [L, cap] captions.
            out = model([xi.unsqueeze(1) for xi in x], 1.0 - sigma, list(ctx), return_dict=False)
            out = torch.stack([o.squeeze(1) for o in out[0]])
            tensors[f"golden.{name}.x"] = x
            tensors[f"golden.{name}.sigma"] = sigma
            tensors[f"golden.{name}.context"] = ctx
            tensors[f"golden.{name}.out"] = -out
            cases[name] = dict(batch=batch, cap_len=cap_len, h=h, w=w, sigmas=sigmas)
    meta = {"config": json.dumps(dict(CONFIG, t_mid=T_MID)), "cases": json.dumps(cases),
            "source": "diffusers ZImageTransformer2DModel (transformer_z_image.py), torch "
                      + torch.__version__,
            "full_size.turbo": full_size_counts(zi)}
    save_safetensors(args.out, tensors, meta)
    print("wrote", args.out, os.path.getsize(args.out), "bytes")


if __name__ == "__main__":
    main()
