#!/usr/bin/env python3
"""Reference data for headroom's T5 v1.1 encoder graph (src/models/t5/t5_encoder.*), made with
ComfyUI's own T5 class (comfy/text_encoders/t5.py, commit a125cd84) on a tiny random config.

Usage: make_t5_encoder_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84, e.g.
  git --git-dir=<mirror> archive a125cd84 | tar -x -C DIR

Writes, beside this script:
  tiny_t5_encoder.safetensors  the tiny checkpoint, f16, keys as in a ComfyUI t5xxl file under the
                               prefix "text_encoders.t5xxl.transformer." (the encoder's keys only)
  t5_encoder_golden.safetensors  f32/i64: per case "<case>.ids" [B, L] and "<case>.hidden" [B, L, C]
  t5_encoder_golden.json       the config and _relative_position_bucket's values for -300..300

Runs on the CPU with torch 1.13. As sd1_clip.SDClipModel does for ComfyUI's T5XXLModel (Flux's
T5: attention_mask=False, layer "last"), the token embeddings are taken with out_dtype float32 and
the transformer runs with dtype=float32 on comfy.ops.manual_cast, so every f16 weight is cast to
f32 at use (the model is built with dtype float16, as ComfyUI builds it for an f16 file).
Packages this machine lacks (safetensors, transformers, ...) are stubbed (../comfy_harness.py's
stub_packages); none of the code used here calls them. Safetensors files are written by
comfy_harness's safetensors_write.
"""

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/data: comfy_harness
from comfy_harness import safetensors_write, stub_packages  # noqa: E402

PREFIX = "text_encoders.t5xxl.transformer."
CONFIG = {"vocab_size": 4096, "d_model": 32, "d_kv": 8, "num_heads": 4, "d_ff": 48,
          "num_layers": 2, "dense_act_fn": "gelu_pytorch_tanh", "is_gated_act": True,
          "model_type": "t5"}

STUBBED_ROOTS = {"einops", "safetensors", "torchvision", "transformers", "tokenizers", "sentencepiece"}


def import_comfy(comfy_dir):
    stub_packages(STUBBED_ROOTS)
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.ops
    import comfy.ldm.modules.attention as attention
    import comfy.text_encoders.t5 as t5
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        # torch 1.13 lacks it; ComfyUI picks attention_pytorch only when pytorch attention is
        # enabled. Same math as torch 2's: softmax(q k^T / sqrt(d) + mask) v.
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
            s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
            if attn_mask is not None:
                s = s + attn_mask
            return torch.softmax(s, dim=-1) @ v
        torch.nn.functional.scaled_dot_product_attention = sdpa
        comfy.ops.scaled_dot_product_attention = sdpa
    return comfy, t5, attention


DT = {"F16": (np.float16, 2), "F32": (np.float32, 4), "I64": (np.int64, 8)}


def save(path, tensors):
    safetensors_write(path, ((name, dt, arr.shape,
                              np.ascontiguousarray(arr.astype(DT[dt][0])).tobytes())
                             for name, (dt, arr) in tensors.items()))


def random_weights(g):
    c = CONFIG
    D, inner, F = c["d_model"], c["d_kv"] * c["num_heads"], c["d_ff"]
    w = {"shared.weight": torch.randn(c["vocab_size"], D, generator=g)}
    lin = lambda o, i: torch.randn(o, i, generator=g) / i ** 0.5  # noqa: E731
    norm = lambda: 1.0 + 0.2 * torch.randn(D, generator=g)  # noqa: E731
    for i in range(c["num_layers"]):
        p = "encoder.block.%d.layer." % i
        for n in "qkvo":
            w[p + "0.SelfAttention.%s.weight" % n] = lin(inner, D) if n != "o" else lin(D, inner)
        if i == 0:
            w[p + "0.SelfAttention.relative_attention_bias.weight"] = torch.randn(32, c["num_heads"], generator=g)
        w[p + "0.layer_norm.weight"] = norm()
        w[p + "1.DenseReluDense.wi_0.weight"] = lin(F, D)
        w[p + "1.DenseReluDense.wi_1.weight"] = lin(F, D)
        w[p + "1.DenseReluDense.wo.weight"] = lin(D, F)
        w[p + "1.layer_norm.weight"] = norm()
    w["encoder.final_layer_norm.weight"] = norm()
    return {k: v.half() for k, v in w.items()}


def main():
    comfy, t5, attention = import_comfy(os.path.abspath(sys.argv[1]))
    g = torch.Generator().manual_seed(39)
    weights = random_weights(g)
    model = t5.T5(CONFIG, torch.float16, "cpu", comfy.ops.manual_cast)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not missing and not unexpected, (missing, unexpected)

    V = CONFIG["vocab_size"]
    cases = {
        # two rows of 12 tokens (EOS = 1 ends each, pad 0 after it)
        "short": torch.tensor([[71, 3, 2155, 13, 8, 1712, 1023, 5, 1, 0, 0, 0],
                               [363, 19, 8, 3, 4059, 1, 0, 0, 0, 0, 0, 0]]),
        # Flux's T5 row: min_length 256, padded with 0 and not masked; relative distances reach
        # past max_distance 128
        "flux256": torch.cat([torch.randint(2, V, (1, 40), generator=g),
                              torch.tensor([[1]]), torch.zeros(1, 215, dtype=torch.long)], 1),
    }
    out = {}
    with torch.no_grad():
        for name, ids in cases.items():
            embeds = model.get_input_embeddings()(ids, out_dtype=torch.float32)
            z, _ = model(None, None, embeds=embeds, num_tokens=None, intermediate_output=None,
                         final_layer_norm_intermediate=True, dtype=torch.float32)
            assert z.dtype == torch.float32
            out[name + ".ids"] = ("I64", ids.numpy())
            out[name + ".hidden"] = ("F32", z.numpy())
            print(name, tuple(z.shape), float(z.abs().max()))

    rel = torch.arange(-300, 301)
    buckets = t5.T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=32,
                                                       max_distance=128)
    save(os.path.join(HERE, "tiny_t5_encoder.safetensors"),
         {PREFIX + k: ("F16", v.numpy()) for k, v in weights.items()})
    save(os.path.join(HERE, "t5_encoder_golden.safetensors"), out)
    with open(os.path.join(HERE, "t5_encoder_golden.json"), "w") as f:
        json.dump({"comfyui": "Comfy-Org/ComfyUI a125cd84", "config": CONFIG, "prefix": PREFIX,
                   "attention": attention.optimized_attention_for_device(torch.device("cpu"), small_input=True).__name__,
                   "relative_position_first": -300,
                   "relative_position_bucket": [int(b) for b in buckets]}, f, indent=None)
        f.write("\n")


if __name__ == "__main__":
    main()
