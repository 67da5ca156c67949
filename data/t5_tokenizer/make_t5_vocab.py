#!/usr/bin/env python3
"""Derives headroom's compact T5 v1.1 tokenizer files from the Hugging Face tokenizer.json.

usage: make_t5_vocab.py TOKENIZER_JSON OUT_DIR

Writes, losslessly for everything the Unigram tokenizer reads (src/models/t5/t5_tokenizer.cpp):
  pieces.txt    the 32,100 pieces in id order, one per line (UTF-8; no piece holds '\\n')
  scores.f32    their scores as little-endian float32 (every score in the JSON is a float32 value,
                checked below, so the conversion is exact)
  charsmap.bin  the normalizer's precompiled_charsmap, base64-decoded
and checks that the rest of the file is what the C++ code hard-codes: the normalizer sequence
(Precompiled, Strip right, Replace ' {2,}' -> U+2581), the Metaspace pre-tokenizer (U+2581,
prepend_scheme first, split), Unigram with unk_id 2 and no byte fallback, the added tokens (<pad>,
</s>, <unk>, <extra_id_N>: special, not normalized, no strip) and the '</s>' post-processor.
"""
import base64
import json
import os
import struct
import sys


def check_config(j):
    norms = j["normalizer"]
    assert norms["type"] == "Sequence", norms["type"]
    n = norms["normalizers"]
    assert [x["type"] for x in n] == ["Precompiled", "Strip", "Replace"], n
    assert n[1]["strip_left"] is False and n[1]["strip_right"] is True, n[1]
    assert n[2]["pattern"] == {"Regex": " {2,}"} and n[2]["content"] == "\u2581", n[2]
    pre = j["pre_tokenizer"]
    assert pre["type"] == "Metaspace" and pre["replacement"] == "\u2581", pre
    assert pre.get("prepend_scheme") == "first" and pre.get("split", True) is True, pre
    m = j["model"]
    assert m["type"] == "Unigram" and m["unk_id"] == 2 and not m.get("byte_fallback"), m.keys()
    post = j["post_processor"]
    assert post["type"] == "TemplateProcessing", post
    assert post["single"] == [{"Sequence": {"id": "A", "type_id": 0}},
                              {"SpecialToken": {"id": "</s>", "type_id": 0}}], post["single"]
    assert post["special_tokens"]["</s>"]["ids"] == [1]
    vocab = m["vocab"]
    for t in j["added_tokens"]:
        name = t["content"]
        assert vocab[t["id"]][0] == name, t
        assert t["special"] and not t["normalized"] and not t["lstrip"] and not t["rstrip"], t
        assert not t["single_word"], t
        assert name in ("<pad>", "</s>", "<unk>") or (
            name.startswith("<extra_id_") and t["id"] == 32099 - int(name[10:-1])), t
    assert len(j["added_tokens"]) == 103


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    check_config(j)
    vocab = j["model"]["vocab"]
    assert len(vocab) == 32100
    lines, scores = [], bytearray()
    for piece, score in vocab:
        assert piece and "\n" not in piece and "\r" not in piece, repr(piece)
        packed = struct.pack("<f", score)
        assert struct.unpack("<f", packed)[0] == score, (piece, score)
        lines.append(piece)
        scores += packed
    assert len(set(lines)) == len(lines)
    charsmap = base64.b64decode(j["normalizer"]["normalizers"][0]["precompiled_charsmap"])
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "pieces.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "scores.f32"), "wb") as f:
        f.write(scores)
    with open(os.path.join(out, "charsmap.bin"), "wb") as f:
        f.write(charsmap)


if __name__ == "__main__":
    main()
