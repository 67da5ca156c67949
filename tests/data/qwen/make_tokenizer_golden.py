#!/usr/bin/env python3
"""Writes tokenizer_ids.json: the token ids that transformers' Qwen2 tokenizers give for a corpus,
from headroom's data/qwen_tokenizer files (local files only, no network).

usage (repository root, on a machine with transformers 4.5x and tokenizers):
  python3 tests/data/qwen/make_tokenizer_golden.py --vocab-dir data/qwen_tokenizer \
      --out tests/data/qwen/tokenizer_ids.json

Two added-token sets are checked (Note [Qwen added tokens] in src/models/qwen/qwen_tokenizer.cpp):
"config" loads the folder as it is (ComfyUI's qwen25_tokenizer); "qwen3" loads a copy in /tmp
whose tokenizer_config.json has Qwen3's 151665-151668 (<tool_response>, </tool_response>,
<think>, </think>) instead. Each string goes through the slow Qwen2Tokenizer (python `regex`)
and Qwen2TokenizerFast (`tokenizers`, converted from the slow files); a string whose ids differ
between the two is written with "agree": false and printed (the C++ test skips it).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import unicodedata

QWEN3_OWN = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>",
             151668: "</think>"}


def zimage(prompt):
    # Z-Image's wrapping (diffusers ZImagePipeline with Qwen3's chat template, ComfyUI z_image.py).
    return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"


CORPUS = [
    "",
    " ",
    "\n",
    "hello world",
    "Hello, World! How's it going?",
    "DON'T STOP. I'M HERE, WE'LL GO, THEY'RE IN, YOU'VE SEEN, HE'D LEFT, IT'S OK",
    "a'b 's 'S 'll 'LL 'Re 've x'",
    "The year 2025 has 365 days; pi is about 3.14159265358979",
    "1234567890 +1-800-555-0199 1,000,000.50 $42 3141592653589793238462643383279",
    "  leading spaces and trailing   ",
    "a  b   c    d     e",
    "tabs\tand\t\tdouble tabs\t",
    "line one\nline two\n\nline four\r\nwindows\r\n",
    "   \n\n   x",
    "x\n \n y \t\n",
    " !?\n\n",
    "...!!!???---*** ,;: --> <=",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",
    "\u4e2d\u6587\u63d0\u793a\u8bcd\uff1a\u4e00\u53ea\u53ef\u7231\u7684\u732b\u5750\u5728\u7a97\u53f0\u4e0a\uff0c\u9633\u5149\u660e\u5a9a\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4",
    "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b1\u03b9 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0646\u0635",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092a\u093e\u0920",
    "emoji \U0001f389\U0001f389 party \U0001f600!",
    "family \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 flag \U0001f1ef\U0001f1f5 thumbs \U0001f44d\U0001f3fd",
    "\u00b2\u00b3 \u00bd \u216b \u2460 \u0663\u0664",
    "\u3000full-width\u3000space \uff21\uff22\uff23\uff11\uff12\uff13",
    "mixed CASE words ABC abc AbC",
    "snake_case_name camelCaseName kebab-case",
    "email@example.com https://example.org/path?q=1&x=2",
    "quotes \"double\" 'single' `back` (parens) [brackets] {braces} <angles>",
    "long s \u017fun '\u017f",
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more<|endoftext|><|endoftext|>",
    "<|im_start| and <|im_end and |>",
    "<think>\n\n</think>\n\n<tool_call>x</tool_call><|img|>",
    zimage("A photograph of a red fox in a snowy forest, golden hour lighting, 85mm lens."),
    zimage("\u4e00\u53ea\u732b, 4k, ultra-detailed"),
    zimage(""),
]


def qwen3_dir(src):
    d = tempfile.mkdtemp(prefix="qwen3_tok_")
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(src, f), d)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    added = config["added_tokens_decoder"]
    for k in [k for k in added if int(k) in QWEN3_OWN]:
        del added[k]
    for i, content in QWEN3_OWN.items():
        added[str(i)] = {"content": content, "lstrip": False, "normalized": False,
                         "rstrip": False, "single_word": False, "special": False}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    return d


def load(folder):
    import transformers
    out = {}
    for name, cls in (("slow", "Qwen2Tokenizer"), ("fast", "Qwen2TokenizerFast")):
        try:
            tok = getattr(transformers, cls).from_pretrained(folder, local_files_only=True)
        except Exception as e:  # e.g. transformers 5, whose Qwen2Tokenizer is the fast one
            print("%s %s unavailable: %r" % (name, cls, e), file=sys.stderr)
            continue
        if name == "slow" and getattr(tok, "is_fast", False):
            print("Qwen2Tokenizer is a fast tokenizer in transformers %s" % transformers.__version__,
                  file=sys.stderr)
        out[name] = tok
    if not out:
        sys.exit("no Qwen2 tokenizer could be loaded from %s" % folder)
    return out


def encode_all(toks, text):
    ids = {name: list(t.encode(text, add_special_tokens=False)) for name, t in toks.items()}
    first = next(iter(ids.values()))
    return first, all(v == first for v in ids.values()), ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-dir", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    sets = {"config": load(args.vocab_dir), "qwen3": load(qwen3_dir(args.vocab_dir))}
    cases, bad = [], 0
    for text in CORPUS:
        case = {"text": text, "nfc": unicodedata.normalize("NFC", text)}
        agree = True
        for name, toks in sets.items():
            ids, ok, each = encode_all(toks, text)
            case["ids_" + name] = ids
            if not ok:
                agree = False
                print("MISMATCH (%s) %r: %s" % (name, text, each), file=sys.stderr)
        case["agree"] = agree
        bad += not agree
        cases.append(case)
    doc = {
        "generator": "tests/data/qwen/make_tokenizer_golden.py",
        "transformers": transformers.__version__,
        "references": sorted(sets["config"].keys()),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("wrote %d cases (%d where the references disagree) to %s" % (len(cases), bad, args.out))


if __name__ == "__main__":
    main()
