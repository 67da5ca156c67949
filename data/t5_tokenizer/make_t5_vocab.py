#!/usr/bin/env python3
"""Derives headroom's compact T5 v1.1 tokenizer files from the Hugging Face tokenizer.json.

usage: make_t5_vocab.py TOKENIZER_JSON OUT_DIR       derive the compact files
       make_t5_vocab.py --rebuild DATA_DIR OUT_JSON  write tokenizer.json back from them

Writes, losslessly for everything the Unigram tokenizer reads (src/models/t5/t5_tokenizer.cpp):
  pieces.txt    the 32,100 pieces in id order, one per line (UTF-8; no piece holds '\\n')
  scores.f32    their scores as little-endian float32 (every score in the JSON is a float32 value,
                checked below, so the conversion is exact)
  charsmap.bin  the normalizer's precompiled_charsmap, base64-decoded
and checks that the rest of the file is what the C++ code hard-codes: the normalizer sequence
(Precompiled, Strip right, Replace ' {2,}' -> U+2581), the Metaspace pre-tokenizer (U+2581,
prepend_scheme first, split), Unigram with unk_id 2 and no byte fallback, the added tokens (<pad>,
</s>, <unk>, <extra_id_N>: special, not normalized, no strip) and the '</s>' post-processor.

The derivation is checked to be lossless: --rebuild (rebuild_tokenizer_json) writes tokenizer.json
back from the compact files and the fixed layout, and deriving asserts that this gives the input
file byte for byte (ComfyUI's comfy/text_encoders/t5_tokenizer/tokenizer.json, git blob
TOKENIZER_JSON_BLOB). tests/data/t5/make_t5_golden.py runs the reference libraries on the rebuilt
file.
"""
import base64
import hashlib
import json
import os
import struct
import sys

# `git hash-object` of ComfyUI's (a125cd84) and google/t5-v1_1-xxl's tokenizer.json.
TOKENIZER_JSON_BLOB = "b11c92d7184d265f0dc857ec5d676aa81aa16262"


def git_blob_hash(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _added_token(token_id, content):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def rebuild_tokenizer_json(data_dir):
    """tokenizer.json (bytes) from pieces.txt, scores.f32, charsmap.bin and the fixed layout."""
    with open(os.path.join(data_dir, "pieces.txt"), encoding="utf-8") as f:
        pieces = f.read().split("\n")[:-1]
    with open(os.path.join(data_dir, "scores.f32"), "rb") as f:
        raw = f.read()
    scores = struct.unpack("<%df" % (len(raw) // 4), raw)
    with open(os.path.join(data_dir, "charsmap.bin"), "rb") as f:
        charsmap = base64.b64encode(f.read()).decode("ascii")
    added = [_added_token(i, pieces[i]) for i in range(3)]
    added += [_added_token(i, pieces[i]) for i in range(32000, 32100)]
    special = lambda name: {"SpecialToken": {"id": name, "type_id": 0}}
    seq = lambda name: {"Sequence": {"id": name, "type_id": 0}}
    j = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": charsmap},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
                          "prepend_scheme": "first"},
        "post_processor": {
            "type": "TemplateProcessing", "single": [seq("A"), special("</s>")],
            "pair": [seq("A"), special("</s>"), seq("B"), special("</s>")],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
                    "prepend_scheme": "always"},
        "model": {"type": "Unigram", "unk_id": 2,
                  "vocab": [[p, float(s)] for p, s in zip(pieces, scores)],
                  "byte_fallback": False},
    }
    return json.dumps(j, indent=2, ensure_ascii=False).encode("utf-8")


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
    if sys.argv[1] == "--rebuild":
        data = rebuild_tokenizer_json(sys.argv[2])
        assert git_blob_hash(data) == TOKENIZER_JSON_BLOB, "rebuilt tokenizer.json differs"
        with open(sys.argv[3], "wb") as f:
            f.write(data)
        return
    src, out = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        original = f.read()
    j = json.loads(original)
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
    assert rebuild_tokenizer_json(out) == original, "the compact form does not give the input back"
    print("lossless: rebuilt tokenizer.json == input (git blob %s)" % git_blob_hash(original))


if __name__ == "__main__":
    main()
