#!/usr/bin/env python3
"""Reference data for headroom's Flux text-encoder component (src/models/flux/flux_text_encoder.*),
made with ComfyUI's own comfy.text_encoders.flux.FluxClipModel (commit a125cd84) on tiny random
encoders that are already in the repository, on this machine's CPU torch 1.13.

Usage: make_flux_te_golden.py COMFYUI_DIR
  COMFYUI_DIR: an unpacked ComfyUI source tree, e.g.
  git --git-dir=<mirror> archive a125cd84 | tar -x -C DIR

Models (nothing new is stored):
  CLIP-L: the text encoder of tests/data/golden/tiny-sd1.safetensors
          ("cond_stage_model.transformer.", width 32, 2 layers, 4 heads, f16, full 49408 vocab)
  T5-XXL: tests/data/t5/tiny_t5_encoder.safetensors ("text_encoders.t5xxl.transformer.",
          vocab 4096, d_model 32, 2 layers, f16)
FluxClipModel is built as comfy.sd.load_clip builds it for two f16 files (dtype float16 for both,
comfy.ops.manual_cast), the configs given through model_options "clip_l_model_config" /
"t5xxl_model_config" (SDClipModel's own override mechanism).

Token ids are never made here: they come from the reference tokenizer goldens,
tests/data/golden/golden-tokenizer.json ("sd1_and_sdxl_clip_l" rows: ComfyUI's SD1Tokenizer,
which FluxTokenizer.clip_l is) and tests/data/t5/t5_tokens_golden.json ("comfyui_flux" rows:
FluxTokenizer.t5xxl). Each case gives CLIP-L and T5 their own text, as CLIPTextEncodeFlux does
(clip_l / t5xxl inputs); T5 texts are ones whose ids fit the tiny T5's 4096-entry vocabulary.

Cases: encode_token_weights({"l": ..., "t5xxl": ...}) -> (T5 conditioning [1, 256, 32], CLIP-L
pooled [1, 32]); "clip_skip" runs after set_clip_options({"layer": -2}) (CLIPSetLastLayer -2,
which reaches both encoders); "overflow" uses the tiny T5 with some weights multiplied by powers
of two (exact in f16) so that its residual stream exceeds float16's range (65504) while
ComfyUI's f32 computation stays finite: the T5 f16 overflow case; "fp8_scaled" runs the tiny T5 as
ComfyUI's scaled fp8 file layout (t5xxl_fp8_e4m3fn_scaled: every Linear weight e4m3fn with a
power-of-two scale_weight, the "scaled_fp8" marker; comfy.ops.scaled_fp8_ops through
model_options "t5xxl_scaled_fp8", torch 1.13's missing float8 dtype stood in for by
tests/data/fp8/fp8_shim.py, which holds every e4m3fn value exactly); "bf16" the tiny T5 rounded to
bfloat16 (dtype_t5 bf16).

Writes flux_te_golden.safetensors beside this script: per case "<case>.cond" (F32 [1, 256, 32]),
"<case>.pooled" (F32 [1, 32]), "<case>.l_ids" / "<case>.t5_ids" (I64, the reference ids) and the
JSON metadata "cases" (texts, layer, T5 scaling, the overflow case's largest |residual|), and for
the fp8 case "fp8.<T5 weight>" (F8_E4M3 codes, round to nearest even of w / scale) and
"fp8.<layer>.scale_weight" (F32 scalar), from which the C++ test assembles the scaled fp8 file.
"""

import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "data", "t5"))
sys.path.insert(0, os.path.join(REPO, "tests", "data", "fp8"))
import fp8_shim  # noqa: E402  (torch 1.13 stand-in for float8_e4m3fn; before comfy)
import make_t5_encoder_golden as t5gold  # noqa: E402  (stubs and the comfy import)

CLIP_FILE = os.path.join(REPO, "tests/data/golden/tiny-sd1.safetensors")
CLIP_PREFIX = "cond_stage_model.transformer."
T5_FILE = os.path.join(REPO, "tests/data/t5/tiny_t5_encoder.safetensors")
T5_PREFIX = "text_encoders.t5xxl.transformer."
CLIP_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
               "intermediate_size": 64}
T5_CONFIG = {k: v for k, v in t5gold.CONFIG.items()}

# name, CLIP-L prompt (golden-tokenizer.json), T5 prompt (t5_tokens_golden.json), layer
CASES = [
    ("plain", "plain", "a cat", None),
    ("weighted", "weighted", "(weight:abc) (:2) (x:-0.5) (y:1e-1)", None),
    ("empty", "empty", "", None),
    ("clip_skip", "plain", "a cat", -2),
    ("overflow", "plain", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", None),
    ("fp8_scaled", "weighted", "(weight:abc) (:2) (x:-0.5) (y:1e-1)", None),
    ("bf16", "weighted", "(weight:abc) (:2) (x:-0.5) (y:1e-1)", None),
]
# The overflow T5: these tensors multiplied by these powers of two.
OVERFLOW_SCALE = {"encoder.block.0.layer.1.layer_norm.weight": 64.0,
                  "encoder.block.0.layer.1.DenseReluDense.wo.weight": 64.0,
                  "encoder.block.1.layer.1.layer_norm.weight": 1.0 / 64.0}

NP = {"F16": np.float16, "F32": np.float32, "I64": np.int64, "F8_E4M3": np.uint8}
E4M3_GRID = fp8_shim.fp8_grid(0)


def scaled_fp8(w):
    """A Linear weight as ComfyUI's scaled fp8 files store it: e4m3fn codes (round to nearest
    even, fp8_shim.rne_expected) of w / scale, scale a power of two (so both of ComfyUI's
    products, weight * scale and input * scale, are exact) with max |w| / scale <= 448."""
    top = float(w.float().abs().max())
    scale = 2.0 ** int(np.ceil(np.log2(top / 448.0)))
    codes = [fp8_shim.rne_expected(float(v) / scale, 0) for v in w.float().flatten().tolist()]
    vals = [(-1.0 if c & 0x80 else 1.0) * float(E4M3_GRID[c & 0x7F]) for c in codes]
    return (np.array(codes, dtype=np.uint8).reshape(tuple(w.shape)),
            torch.tensor(vals, dtype=torch.float64).reshape(w.shape), scale)


def load(path, prefix):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or not k.startswith(prefix):
            continue
        a, b = v["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=NP[v["dtype"]]).reshape(v["shape"])
        out[k[len(prefix):]] = torch.from_numpy(arr.copy())
    return out


def reference_rows(text_l, text_t5):
    clip = json.load(open(os.path.join(REPO, "tests/data/golden/golden-tokenizer.json")))
    t5 = json.load(open(os.path.join(REPO, "tests/data/t5/t5_tokens_golden.json")))
    lp = next(p for p in clip["prompts"] if p["name"] == text_l)
    l_rows = lp["sd1_and_sdxl_clip_l"]
    l_pairs = [list(zip(i, w)) for i, w in zip(l_rows["ids"], l_rows["weights"])]
    tp = next(p for p in t5["comfyui_flux"] if p["text"] == text_t5)
    t5_pairs = [list(zip(r["ids"], r["weights"])) for r in tp["rows"]]
    return lp["text"], l_pairs, t5_pairs


def build(comfy, flux, t5_weights, clip_weights, dtype_t5=torch.float16, scaled=None):
    opts = {"clip_l_model_config": dict(CLIP_CONFIG), "t5xxl_model_config": dict(T5_CONFIG)}
    m = flux.flux_clip(dtype_t5=dtype_t5, t5xxl_scaled_fp8=scaled)(device="cpu", dtype=torch.float16,
                                                                  model_options=opts)
    sd = {"clip_l.transformer." + k: v for k, v in clip_weights.items()}
    sd.update({"t5xxl.transformer." + k: v for k, v in t5_weights.items()})
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # text_projection is not in an SD1 file and not used by Flux (return_projected_pooled=False)
    assert set(missing) == {"clip_l.transformer.text_projection.weight", "clip_l.logit_scale",
                            "t5xxl.logit_scale"} or not missing, missing
    assert set(unexpected) <= {"clip_l.transformer.text_model.embeddings.position_ids"}, unexpected
    return m


def residual_max(model, ids):
    """Largest |x| of the T5 residual stream (f32, as ComfyUI computes it)."""
    top = [0.0]
    hooks = [b.register_forward_hook(lambda mod, i, o: top.__setitem__(0, max(top[0], float(o[0].abs().max()))))
             for b in model.t5xxl.transformer.encoder.block]
    with torch.no_grad():
        model.t5xxl.encode_token_weights([[(i, 1.0) for i in ids]])
    for h in hooks:
        h.remove()
    return top[0]


def main():
    comfy, _, _ = t5gold.import_comfy(os.path.abspath(sys.argv[1]))
    import comfy.text_encoders.flux as flux
    clip_w = load(CLIP_FILE, CLIP_PREFIX)
    t5_w = load(T5_FILE, T5_PREFIX)
    t5_over = {k: (v.float() * OVERFLOW_SCALE[k]).half() if k in OVERFLOW_SCALE else v
               for k, v in t5_w.items()}
    for k, s in OVERFLOW_SCALE.items():  # exact in f16
        assert torch.equal(t5_over[k].float(), t5_w[k].float() * s), k
    # ComfyUI's scaled fp8 T5 (t5xxl_fp8_e4m3fn_scaled): every Linear weight in e4m3fn with its
    # scale_weight and the "scaled_fp8" marker, the rest f16; t5_xxl_detect then gives
    # dtype_t5 = f16 (the final norm's) and t5xxl_scaled_fp8 = float8_e4m3fn.
    t5_fp8, fp8_codes = dict(t5_w), {}
    for k, v in t5_w.items():
        if ".SelfAttention." in k and "relative_attention_bias" not in k or ".DenseReluDense." in k:
            codes, vals, scale = scaled_fp8(v)
            t5_fp8[k] = vals
            t5_fp8[k[: -len("weight")] + "scale_weight"] = torch.tensor(scale, dtype=torch.float32)
            fp8_codes[k] = (codes, scale)
    t5_fp8["scaled_fp8"] = torch.tensor([], dtype=torch.float8_e4m3fn)
    models = {"overflow": build(comfy, flux, t5_over, clip_w),
              "fp8_scaled": build(comfy, flux, t5_fp8, clip_w, torch.float16, torch.float8_e4m3fn),
              "bf16": build(comfy, flux, {k: v.bfloat16() for k, v in t5_w.items()}, clip_w,
                            torch.bfloat16)}
    plain = build(comfy, flux, t5_w, clip_w)
    # The scaled model really holds the fp8 values and scales (load_state_dict kept them).
    q = models["fp8_scaled"].t5xxl.transformer.encoder.block[0].layer[0].SelfAttention.q
    assert q.weight.dtype == torch.float8_e4m3fn and float(q.scale_weight) == fp8_codes[
        "encoder.block.0.layer.0.SelfAttention.q.weight"][1]

    out, meta = {}, []
    for name, text_l, text_t5, layer in CASES:
        full_l, l_pairs, t5_pairs = reference_rows(text_l, text_t5)
        m = models.get(name, plain)
        if layer is not None:
            m.set_clip_options({"layer": layer})
        with torch.no_grad():
            cond, pooled = m.encode_token_weights({"l": l_pairs, "t5xxl": t5_pairs})
        m.reset_clip_options()
        assert torch.isfinite(cond).all() and torch.isfinite(pooled).all(), name
        out[name + ".cond"] = ("F32", cond.float().numpy())
        out[name + ".pooled"] = ("F32", pooled.float().numpy())
        out[name + ".l_ids"] = ("I64", np.array([[i for i, _ in r] for r in l_pairs]))
        out[name + ".t5_ids"] = ("I64", np.array([[i for i, _ in r] for r in t5_pairs]))
        entry = {"name": name, "clip_l": full_l, "t5xxl": text_t5, "layer": layer or 0}
        if name == "overflow":
            entry["t5_scale"] = OVERFLOW_SCALE
            entry["t5_residual_max"] = residual_max(m, [i for i, _ in t5_pairs[0]])
            assert entry["t5_residual_max"] > 65504.0, entry["t5_residual_max"]
        if name == "fp8_scaled":
            for k, (codes, scale) in fp8_codes.items():
                out["fp8." + k] = ("F8_E4M3", codes)
                out["fp8." + k[: -len("weight")] + "scale_weight"] = ("F32", np.array(scale, dtype=np.float32))
        meta.append(entry)
        print(name, tuple(cond.shape), tuple(pooled.shape), float(cond.abs().max()),
              entry.get("t5_residual_max", ""))

    header, blobs, off = {}, [], 0
    for k, (dt, arr) in out.items():
        b = np.ascontiguousarray(arr.astype(NP[dt])).tobytes()
        header[k] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"comfyui": "Comfy-Org/ComfyUI a125cd84",
                              "cases": json.dumps(meta, ensure_ascii=False)}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(HERE, "flux_te_golden.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    main()
