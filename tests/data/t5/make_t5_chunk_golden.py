#!/usr/bin/env python3
"""ComfyUI's row building for T5 (comfy/sd1_clip.py SDTokenizer.tokenize_with_weights with the
T5XXLTokenizer arguments of comfy/text_encoders/flux.py and sd3_clip.py) on a tokenizer whose ids
are trivial to state: headroom's ByteTokenizer rule (every UTF-8 byte b is id b + 1, end 258).
Checks prompt weighting, escapes, embedding-word splits, padding, min_padding / min_length and
chunking independently of the T5 vocabulary. Written to t5_chunk_golden.json beside this file.

usage: make_t5_chunk_golden.py COMFYUI_DIR   (runs with torch 1.13; transformers, einops and
safetensors, which ComfyUI's modules import at the top but these calls never use, are stubbed
where missing)
"""
import importlib.util
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))

TEXTS = [
    "", "a cat", "a (red:1.3) car, ((masterpiece)), [blurry], (blue sky:0.8)",
    "\\(escaped\\) parens (nested (inner:1.5) outer:1.2) end",
    "a photo of embedding:foo a cat embedding:bar, dog\nembedding:baz",
    "(unclosed paren and a colon: here", "(weight:abc) (:2) (x:-0.5) (y:1e-1)",
    "caf\u00e9 \U0001F600 (\u4f60\u597d:1.4)", "((a)) (((b))) (c:0) (d:  2 )",
    "a (long weighted group of many many bytes:1.25) and tail text " * 3,
]

# name: SDTokenizer keyword arguments (tokenizer_class and tokenizer_path are added below).
CONFIGS = {
    "flux": dict(pad_with_end=False, embedding_key="t5xxl", has_start_token=False,
                 pad_to_max_length=False, max_length=99999999, min_length=256),
    "sd3": dict(pad_with_end=False, embedding_key="t5xxl", has_start_token=False,
                pad_to_max_length=False, max_length=99999999, min_length=77),
    # Not a ComfyUI model: short rows so that groups split across rows with these options.
    "short_rows": dict(pad_with_end=False, embedding_key="t5xxl", has_start_token=False,
                       pad_to_max_length=False, max_length=20, min_length=None),
}
OPTIONS = [("flux", {"t5xxl_min_padding": 3, "t5xxl_min_length": 0}),
           ("flux", {"t5xxl_min_padding": 2, "t5xxl_min_length": 40})]

EOS = 258


class ByteTokenizer:
    @classmethod
    def from_pretrained(cls, path, **kwargs):
        return cls()

    def __call__(self, text):
        return {"input_ids": [b + 1 for b in text.encode("utf-8")] + [EOS]}

    def get_vocab(self):
        return {"</s>": EOS}


class _StubModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return object


def import_sd1_clip(comfy_dir):
    for name in ("transformers", "einops", "safetensors"):  # imported at the top, never used here
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _StubModule(name)
    sys.path.insert(0, comfy_dir)
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options
    comfy.options.enable_args_parsing()
    import comfy.sd1_clip
    return comfy.sd1_clip


def rows(tok, text, **kwargs):
    out = []
    for row in tok.tokenize_with_weights(text, **kwargs):
        out.append({"ids": [int(t) for t, _ in row], "weights": [float(w) for _, w in row]})
    return out


def main():
    sd1_clip = import_sd1_clip(os.path.abspath(sys.argv[1]))
    toks = {name: sd1_clip.SDTokenizer(tokenizer_path=HERE, tokenizer_class=ByteTokenizer,
                                       embedding_directory=None, **kw)
            for name, kw in CONFIGS.items()}
    cases = []
    for name, kw in CONFIGS.items():
        for text in TEXTS:
            cases.append({"config": name, "text": text, "rows": rows(toks[name], text)})
    for name, opts in OPTIONS:
        for text in TEXTS[:4]:
            cases.append({"config": name, "text": text, "options": opts,
                          "rows": rows(toks[name], text, tokenizer_options=opts)})
    g = {"generator": "tests/data/t5/make_t5_chunk_golden.py", "eos": EOS,
         "configs": CONFIGS, "cases": cases}
    out = os.path.join(HERE, "t5_chunk_golden.json")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("{\n")
        for k in ("generator", "eos", "configs"):
            f.write("  %s: %s,\n" % (json.dumps(k), json.dumps(g[k])))
        f.write('  "cases": [\n')
        f.write(",\n".join("    " + json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n  ]\n}\n")
    print("wrote %s: %d cases" % (out, len(cases)))


if __name__ == "__main__":
    main()
