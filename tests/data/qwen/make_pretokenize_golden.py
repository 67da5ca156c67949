#!/usr/bin/env python3
"""Writes pretokenize_pieces.json: the Qwen2 pre-tokenizer pieces of the corpus of
make_tokenizer_golden.py, computed the way transformers' slow Qwen2Tokenizer does it
(unicodedata NFC, then python `regex`'s findall with its PRETOKENIZE_REGEX pattern, copied below
as a fact). Runs on the CPU machine (needs only the `regex` module).

usage: python3 tests/data/qwen/make_pretokenize_golden.py --out tests/data/qwen/pretokenize_pieces.json
"""
import argparse
import json
import os
import random
import sys
import unicodedata

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_golden import CORPUS  # noqa: E402

# transformers/models/qwen2/tokenization_qwen2.py, PRETOKENIZE_REGEX
PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
           r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL = regex.compile(r"<\|[a-z_]+\|>|</?think>|</?tool_call>|</?tool_response>")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pat = regex.compile(PATTERN)
    cases = []
    for text in CORPUS:
        if SPECIAL.search(text):
            continue  # added tokens are cut out before the pre-tokenizer: not its input
        cases.append({"text": text, "pieces": pat.findall(unicodedata.normalize("NFC", text))})
    # Seeded random strings over characters that stress the alternatives and their backtracking:
    # contraction letters, whitespace of every kind (CR/LF, tab, U+3000, NBSP, U+001C which is not
    # White_Space), marks, digits of several scripts, punctuation, emoji and ZWJ.
    pool = list("aBzsStTlLrReEvVmMdD'ſ19\u0663\u00b2 \t\n\r\u3000\u00a0\u001c.,!-_\"") + [
        "\u00e9", "\u0301", "\u4e2d", "\ud55c", "\U0001f600", "\u200d", "\U0001f389", "  ", "\r\n"]
    rng = random.Random(40)
    for _ in range(400):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 14)))
        cases.append({"text": text, "pieces": pat.findall(unicodedata.normalize("NFC", text))})
    doc = {"generator": "tests/data/qwen/make_pretokenize_golden.py",
           "regex": regex.__version__, "unicodedata": unicodedata.unidata_version, "cases": cases}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), args.out))


if __name__ == "__main__":
    main()
