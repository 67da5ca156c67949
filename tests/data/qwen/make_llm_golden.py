#!/usr/bin/env python3
"""Reference data for headroom's decoder-only LLM text encoder (src/models/llm/llm_encoder.*),
made with ComfyUI's own generic implementation comfy/text_encoders/llama.py (commit a125cd84:
Llama2_ with TransformerBlock, the path Qwen3 takes) on a tiny random Qwen3-shaped config, on
this machine's CPU torch 1.13 (shims from tests/data/comfy_harness.py).

Usage: make_llm_golden.py COMFYUI_DIR
  COMFYUI_DIR: ComfyUI's python sources at a125cd84, e.g. (the full `git archive` stops at a
  missing LFS object; the .py/.json files are enough):
    G="git --git-dir=<ComfyUI mirror>"; for f in $($G ls-tree -r --name-only HEAD comfy \\
      comfy_extras comfy_api comfy_execution folder_paths.py node_helpers.py | \\
      grep -E '\\.(py|json)$'); do mkdir -p DIR/$(dirname $f); $G show HEAD:$f > DIR/$f; done

The config (hidden 32, 4 heads of 16: heads x head_dim = 64 differs from hidden, as Qwen3-4B's
4096 does from 2560) is Qwen3's shape (ComfyUI's later Qwen3_4BConfig, transformers' Qwen3Config): RMS
norms without the +1 (rms_norm_add False), q_norm/k_norm "gemma3" (per-head RMS norm of q and k
before RoPE), no q/k/v bias, grouped-query attention (heads 4, kv heads 2), SiLU-gated MLP,
rotate_half RoPE with theta 1e6, causal mask, no padding. Weights are random (seeded), stored in
the HF layout ("model.embed_tokens.weight", "model.layers.N.self_attn.q_proj.weight", ...) as
ComfyUI's qwen_3_4b.safetensors stores them (Llama2_ lives at ".model" of the Qwen3_4B wrapper).

Each case runs Llama2_.forward(ids, intermediate_output="all", final_layer_norm_intermediate=
False, dtype=float32): the [layers + 1] hidden states of transformers' output_hidden_states
(embeddings, each layer's output, the last one after the final norm); and again with
intermediate_output=-2 (what SDClipModel passes for layer="hidden", layer_idx=-2,
layer_norm_hidden_state=False, Z-Image's and Lumina2's text-encoder setting): the output of the
second-to-last layer without the final norm, which must equal hidden_states[-2].

Writes llm_golden.safetensors beside this script: the weights (F32, HF names), per case
"<case>.ids" (I64 [1, L]), "<case>.hidden_states" (F32 [layers + 1, L, hidden]),
"<case>.hidden_m2" (F32 [1, L, hidden]); metadata "config" (JSON) and "cases".
"""

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "data"))
import comfy_harness  # noqa: E402

CONFIG = {"vocab_size": 300, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096}

# A Qwen2.5-shaped variant (q/k/v projections with bias, no q/k norm; Qwen-Image's language model
# is this shape), smaller: 2 layers.
CONFIG_QWEN25 = dict(CONFIG, num_hidden_layers=2)

# Token sequences (batch 1, no padding): one token, a short one, a longer one with repeats and
# the vocabulary's ends.
CASES = {
    "one": [17],
    "short": [5, 299, 0, 42, 128],
    "long": [151, 3, 3, 3, 77, 250, 9, 0, 299, 64, 12, 200, 31, 5, 5, 118, 260, 1, 99],
}


def random_weights(cfg, g, qwen3=True):
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, K, Dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def lin(o, i):
        return torch.randn(o, i, generator=g) / (i ** 0.5)

    def gamma(n):  # norm weights around 1, different per channel so a misplaced one shows
        return 1.0 + 0.3 * torch.randn(n, generator=g)

    w = {"model.embed_tokens.weight": torch.randn(V, D, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = gamma(D)
        w[p + "self_attn.q_proj.weight"] = lin(H * Dh, D)
        w[p + "self_attn.k_proj.weight"] = lin(K * Dh, D)
        w[p + "self_attn.v_proj.weight"] = lin(K * Dh, D)
        w[p + "self_attn.o_proj.weight"] = lin(D, H * Dh)
        if qwen3:
            w[p + "self_attn.q_norm.weight"] = gamma(Dh)
            w[p + "self_attn.k_norm.weight"] = gamma(Dh)
        else:
            w[p + "self_attn.q_proj.bias"] = 0.5 * torch.randn(H * Dh, generator=g)
            w[p + "self_attn.k_proj.bias"] = 0.5 * torch.randn(K * Dh, generator=g)
            w[p + "self_attn.v_proj.bias"] = 0.5 * torch.randn(K * Dh, generator=g)
        w[p + "post_attention_layernorm.weight"] = gamma(D)
        w[p + "mlp.gate_proj.weight"] = lin(F, D)
        w[p + "mlp.up_proj.weight"] = lin(F, D)
        w[p + "mlp.down_proj.weight"] = lin(D, F)
    w["model.norm.weight"] = gamma(D)
    return {k: v.float().contiguous() for k, v in w.items()}


def comfy_model(cfg, qwen3=True):
    import comfy.ops
    import comfy.text_encoders.llama as llama

    c = llama.Llama2Config(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                           intermediate_size=cfg["intermediate_size"],
                           num_hidden_layers=cfg["num_hidden_layers"],
                           num_attention_heads=cfg["num_attention_heads"],
                           num_key_value_heads=cfg["num_key_value_heads"],
                           max_position_embeddings=cfg["max_position_embeddings"],
                           rms_norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
                           transformer_type="llama")
    # Class-level (unannotated) fields of ComfyUI's configs, set as Qwen3_4BConfig's are, or as
    # Qwen25_3BConfig's (q/k/v bias, no q/k norm).
    c.head_dim = cfg["head_dim"]
    c.rms_norm_add = False
    c.mlp_activation = "silu"
    c.qkv_bias = not qwen3
    c.rope_dims = None
    c.q_norm = "gemma3" if qwen3 else None
    c.k_norm = "gemma3" if qwen3 else None
    c.rope_scale = None

    class Wrapper(torch.nn.Module):  # Qwen3_4B's layout: Llama2_ at ".model"
        def __init__(self):
            super().__init__()
            self.model = llama.Llama2_(c, device="cpu", dtype=torch.float32,
                                       ops=comfy.ops.manual_cast)

    return Wrapper()


def run_cases(m, cfg, cases, prefix, out, meta_cases):
    with torch.no_grad():
        for name in cases:
            ids = CASES[name]
            x = torch.tensor([ids], dtype=torch.long)
            _, all_h = m.model(x, intermediate_output="all", final_layer_norm_intermediate=False,
                               dtype=torch.float32)
            _, m2 = m.model(x, intermediate_output=-2, final_layer_norm_intermediate=False,
                            dtype=torch.float32)
            all_h = all_h[0]  # [layers + 1, L, D]
            assert all_h.shape[0] == cfg["num_hidden_layers"] + 1
            assert torch.equal(all_h[-2], m2[0]), "intermediate -2 is not hidden_states[-2]"
            out[prefix + name + ".ids"] = np.array([ids], dtype=np.int64)
            out[prefix + name + ".hidden_states"] = all_h.float().numpy()
            out[prefix + name + ".hidden_m2"] = m2.float().numpy()
            meta_cases[name] = {"tokens": len(ids), "max_abs_hidden_m2": float(m2.abs().max())}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    shims = comfy_harness.import_comfy(os.path.abspath(sys.argv[1]))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(20261204)
    weights = random_weights(CONFIG, g)
    m = comfy_model(CONFIG)
    m.load_state_dict(weights, strict=True)
    m.eval()
    out, meta_cases = dict(weights), {}
    run_cases(m, CONFIG, list(CASES), "", out, meta_cases)

    # The Qwen2.5-shaped variant, under "qwen25.".
    g25 = torch.Generator().manual_seed(20261205)
    weights25 = random_weights(CONFIG_QWEN25, g25, qwen3=False)
    m25 = comfy_model(CONFIG_QWEN25, qwen3=False)
    m25.load_state_dict(weights25, strict=True)
    m25.eval()
    out.update({"qwen25." + k: v for k, v in weights25.items()})
    meta_cases25 = {}
    run_cases(m25, CONFIG_QWEN25, ["short", "long"], "qwen25.", out, meta_cases25)

    out = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
    meta = {"config": json.dumps(CONFIG), "cases": json.dumps(meta_cases),
            "config_qwen25": json.dumps(CONFIG_QWEN25), "cases_qwen25": json.dumps(meta_cases25),
            "reference": "ComfyUI a125cd84 comfy/text_encoders/llama.py Llama2_ (CPU, float32)",
            "torch": torch.__version__, "shims": shims()}
    path = os.path.join(HERE, "llm_golden.safetensors")
    comfy_harness.save_safetensors(path, out, meta)
    print("wrote", path, os.path.getsize(path), "bytes;", meta["shims"])


if __name__ == "__main__":
    main()
