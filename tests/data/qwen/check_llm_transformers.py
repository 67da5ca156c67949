#!/usr/bin/env python3
"""Cross-check of llm_golden.safetensors (made from ComfyUI's llama.py by make_llm_golden.py)
against transformers' Qwen3Model, for the GPU machine (torch 2, transformers installed).

Usage: python3 tests/data/qwen/check_llm_transformers.py [--golden FILE] [--out DIR]
Loads the golden's tiny weights (HF names, "model." prefix) into Qwen3Model built from a
Qwen3Config with the golden's numbers (metadata "config"), runs every case's ids on the CPU in
float32 with output_hidden_states=True and compares hidden_states[-2] (what Z-Image's pipelines
take) with "<case>.hidden_m2" and every hidden state with "<case>.hidden_states". Prints the
relative L2 errors; writes them as JSON to DIR/llm_transformers_check.json when --out is given;
exits 1 if any exceeds 1e-5.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-5
DT = {"F32": np.float32, "I64": np.int64}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        s, t = e["data_offsets"]
        a = np.frombuffer(data[8 + n + s:8 + n + t], dtype=DT[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, meta


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", default=os.path.join(HERE, "llm_golden.safetensors"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from transformers import Qwen3Config, Qwen3Model
    import transformers

    tensors, meta = load(args.golden)
    cfg = json.loads(meta["config"])
    cases = json.loads(meta["cases"])
    config = Qwen3Config(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                         intermediate_size=cfg["intermediate_size"],
                         num_hidden_layers=cfg["num_hidden_layers"],
                         num_attention_heads=cfg["num_attention_heads"],
                         num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
                         rope_theta=cfg["rope_theta"], rms_norm_eps=cfg["rms_norm_eps"],
                         max_position_embeddings=cfg["max_position_embeddings"],
                         attention_bias=False, hidden_act="silu", tie_word_embeddings=True,
                         use_sliding_window=False)
    # transformers 5 keeps theta in rope_parameters (its config still reads rope_theta=); make
    # sure the model sees the golden's.
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict):
        rp["rope_theta"] = cfg["rope_theta"]
    config._attn_implementation = "eager"
    model = Qwen3Model(config).float().eval()
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(weights, strict=True)

    results, worst = {}, 0.0
    with torch.no_grad():
        for name in cases:
            ids = tensors[name + ".ids"].long()
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
            hs = out.hidden_states
            r = {"hidden_m2": rel(hs[-2][0], tensors[name + ".hidden_m2"][0])}
            want = tensors[name + ".hidden_states"]
            if len(hs) == want.shape[0]:  # embeddings, each layer, the last one normed
                for i, h in enumerate(hs):
                    r["hidden_states[%d]" % i] = rel(h[0], want[i])
            else:
                print("%s: %d hidden states, golden has %d: only [-2] compared"
                      % (name, len(hs), want.shape[0]))
            results[name] = r
            worst = max(worst, max(r.values()))
            print(name, json.dumps(r))
    summary = {"transformers": transformers.__version__, "torch": torch.__version__,
               "tolerance": TOL, "worst": worst, "cases": results}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "llm_transformers_check.json"), "w") as f:
            json.dump(summary, f, indent=1)
    print("worst relative error %.3g (tolerance %g): %s" % (worst, TOL,
                                                           "ok" if worst <= TOL else "FAIL"))
    sys.exit(0 if worst <= TOL else 1)


if __name__ == "__main__":
    main()
