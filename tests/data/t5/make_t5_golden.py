#!/usr/bin/env python3
"""Reference token ids for headroom's T5 v1.1 tokenizer (issue 39), written to
t5_tokens_golden.json beside this file. See README.md here.

usage: make_t5_golden.py COMFYUI_DIR [--out PATH]
  COMFYUI_DIR: an unpacked ComfyUI source tree (comfy/ and its siblings), commit a125cd84; its
  t5_tokenizer folder is not needed (the repository's copy is used).

Needs python3 with `tokenizers`, `transformers` and torch (ComfyUI's modules import it); runs in
a few seconds. Only files inside the repository are read: the tokenizer folder is rebuilt from
data/t5_tokenizer (make_t5_vocab.py --rebuild, checked byte for byte against ComfyUI's
tokenizer.json by its git blob hash) into a temporary folder, with tokenizer_config.json and
special_tokens_map.json copied beside it: the folder ComfyUI ships as
comfy/text_encoders/t5_tokenizer.

Written for every text of CORPUS:
  "tokenizers":   tokenizers.Tokenizer.from_file(tokenizer.json).encode(text).ids
  "transformers": T5TokenizerFast.from_pretrained(folder)(text)["input_ids"]
  "comfyui_flux": comfy.text_encoders.flux.T5XXLTokenizer().tokenize_with_weights(text), i.e.
                  FluxTokenizer's "t5xxl" rows (min_length 256): [{"ids": [...], "weights": [...]}]
and "comfyui_sd3" (comfy.text_encoders.sd3_clip.T5XXLTokenizer, min_length 77) for the first
SD3_COUNT texts, and "comfyui_flux_options": the Flux rows with the tokenizer options of the
T5TokenizerOptions node (t5xxl_min_padding, t5xxl_min_length) for OPTION_CASES. ComfyUI's tokenizers are built with embedding_directory=None, so "embedding:"
words are ordinary text. ComfyUI's T5TokenizerFast is pointed at the rebuilt folder by replacing
the name in the two modules with a subclass whose from_pretrained loads that folder.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/data: comfy_harness
from comfy_harness import stub_packages  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
DATA = os.path.join(REPO, "data", "t5_tokenizer")
SD3_COUNT = 12

LONG_PROMPT = " ".join([
    "A sprawling fantasy city at dusk, built on the terraces of a mountain, with bridges of",
    "white stone between towers, lanterns glowing in every window, a river of mist below,",
    "airships with patched sails drifting between the spires, market stalls selling spices,",
    "silks, brass instruments and maps, children chasing paper birds along the parapets,",
    "an old astronomer on a balcony adjusting a telescope of 1,024 lenses, cats asleep on",
    "warm roof tiles, ivy and wisteria covering the walls, a cathedral whose windows show",
    "the constellations of another sky, snow on the highest peaks, a caravan of 37 camels",
    "winding up the switchback road, banners in crimson and gold, cinematic lighting,",
    "volumetric fog, ultra-detailed, 8k, sharp focus, trending on artstation, by a master",
    "painter of the nineteenth century, oil on canvas, (golden hour:1.2), ((intricate)),",
]) * 3

CORPUS = [
    # Prompt-weight syntax first: comfyui_sd3 covers the first SD3_COUNT texts.
    "a (red:1.3) car, ((masterpiece)), [blurry], (blue sky:0.8)",
    "\\(escaped\\) parens (nested (inner:1.5) outer:1.2) end",
    "a photo of embedding:foo a cat embedding:bar, dog\nembedding:baz",
    "(unclosed paren and a colon: here",
    "(weight:abc) (:2) (x:-0.5) (y:1e-1)",
    "",
    LONG_PROMPT,
    "Pneumonoultramicroscopicsilicovolcanoconiosis (supercalifragilisticexpialidocious:1.1)",
    "A photograph of an astronaut riding a horse on the moon, 4k, highly detailed",
    "naïve café résumé Zoë Björk Ångström über straße",
    "你好，世界 東京タワーの写真 한국어 텍스트",
    "😀 🎉 👍🏽 ❤️ 👨‍👩‍👧 🇩🇪🇫🇷 #️⃣ 1️⃣",
    # ASCII and punctuation
    "a cat",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? (yes) [no] {maybe} <tag> \"quoted\" 'single' -- a—b… end",
    "#hashtag @user $100 50% a&b *star* ~tilde~ `code` ^caret | pipe \\ backslash / slash",
    "https://example.com/path?query=1&b=2#frag",
    "!!!!!!!!!! ........ ,,,, ???",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    # digits
    "1234567890 3.14159 1,000,000 2026-12-03 12:30pm 1st 2nd 3rd 4th",
    "x1 y22 z333 0.5 -7 +8 1e10 0x1F",
    # whitespace runs
    "  leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "tab\tseparated\ttext",
    "new\nline\n\nparagraph",
    "windows\r\nline\r\nends",
    "\u00a0non-breaking\u00a0space \u3000ideographic space",
    "mixed \t \n  whitespace \u2003 em space",
    "   ",
    "\n",
    # accents and compatibility forms
    "e\u0301 decomposed vs \u00e9 precomposed, A\u030a vs \u00c5, \u212b angstrom sign",
    "Crème brûlée à la française, œuvre, Æsir",
    "Ünïcödé Ŝtŕïñĝ ĂăĄą",
    "Ａｂｃ fullwidth ＡＢＣ１２３",
    "ﬁ ﬂ ligatures ½ ⅓ ① ™ ℃ ㎏",
    "Ａ\u0301 fullwidth with a combining mark, ｅ\u0301\u0302 two marks",
    # other scripts
    "中文English混合",
    "a cat 🐱 and a dog 🐶",
    "Привет мир",
    "Γειά σου κόσμε",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีครับ",
    # special tokens and the metaspace character inside the text
    "<extra_id_0> masked </s> end <pad> <unk>",
    "<extra_id_100> is not special, <extra_id_99> is",
    "x<extra_id_5>y",
    "</s>",
    "\u2581already\u2581metaspace \u2581 x",
    # control and invisible characters
    "null\u0000char bell\u0007 del\u007f zero\u200bwidth joiner\u200d soft\u00adhyphen",
    "bom\ufeff and\u2028line separator",
]


# (text, min_padding, min_length) as the T5TokenizerOptions node sets them (comfy_extras/nodes_cond.py).
OPTION_CASES = [("a cat", 3, 0), ("a cat", 0, 0), ("a (red:1.3) car", 5, 8), ("", 2, 0),
                ("The quick brown fox jumps over the lazy dog.", 1, 512)]


# ---------------------------------------------------------------------------------------------
# ComfyUI import. A package that ComfyUI imports unconditionally but this machine lacks becomes
# an empty stub (../comfy_harness.py's stub_packages; found by retrying the import; never torch,
# transformers or tokenizers, which must be real); optional imports inside try/except stay
# missing. The tokenizer code never calls into a stub. The stubbed names are recorded in the
# golden.

NEVER_STUB = {"torch", "transformers", "tokenizers", "comfy", "comfy_extras"}


def import_comfy_tokenizers(comfy_dir, folder):
    sys.path.insert(0, comfy_dir)
    sys.argv = [sys.argv[0], "--cpu"]  # comfy.cli_args: model_management on the CPU
    finder = stub_packages(set())
    for _ in range(40):
        try:
            import comfy.options
            comfy.options.enable_args_parsing()
            import comfy.text_encoders.flux as flux
            import comfy.text_encoders.sd3_clip as sd3_clip
            break
        except ModuleNotFoundError as e:
            root = (e.name or "").split(".")[0]
            if not root or root in NEVER_STUB or root in finder.roots:
                raise
            finder.roots.add(root)
            for m in list(sys.modules):
                if m.split(".")[0] in ("comfy", "comfy_extras"):
                    del sys.modules[m]
    sys.meta_path.remove(finder)
    from transformers import T5TokenizerFast

    class RepoT5TokenizerFast(T5TokenizerFast):
        @classmethod
        def from_pretrained(cls, path, *args, **kwargs):
            return T5TokenizerFast.from_pretrained(folder, *args, **kwargs)

    flux.T5TokenizerFast = RepoT5TokenizerFast
    sd3_clip.T5TokenizerFast = RepoT5TokenizerFast
    tokenizers = (flux.T5XXLTokenizer(embedding_directory=None),
                  sd3_clip.T5XXLTokenizer(embedding_directory=None))
    return tokenizers, sorted(finder.roots)


def comfy_rows(tokenizer, text, **options):
    rows = tokenizer.tokenize_with_weights(text, **options)
    out = []
    for row in rows:
        ids, weights = [], []
        for t, w in row:
            assert isinstance(t, int), "an embedding in a row: %r" % (t,)
            ids.append(t)
            weights.append(float(w))
        out.append({"ids": ids, "weights": weights})
    return out


def build_folder(folder):
    sys.path.insert(0, DATA)
    import make_t5_vocab
    data = make_t5_vocab.rebuild_tokenizer_json(DATA)
    blob = make_t5_vocab.git_blob_hash(data)
    assert blob == make_t5_vocab.TOKENIZER_JSON_BLOB, "rebuilt tokenizer.json differs: " + blob
    with open(os.path.join(folder, "tokenizer.json"), "wb") as f:
        f.write(data)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(DATA, name), os.path.join(folder, name))
    return blob


def write_golden(path, g):
    """One entry a line, so that a diff shows which text changed."""
    lines = ["{"]
    keys = list(g)
    for k, key in enumerate(keys):
        value = g[key]
        end = "," if k + 1 < len(keys) else ""
        if isinstance(value, list):
            lines.append("  %s: [" % json.dumps(key))
            for i, e in enumerate(value):
                sep = "," if i + 1 < len(value) else ""
                lines.append("    " + json.dumps(e, ensure_ascii=True, separators=(",", ":")) + sep)
            lines.append("  ]" + end)
        else:
            lines.append("  %s: %s%s" % (json.dumps(key), json.dumps(value), end))
    lines.append("}")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    comfy_dir = sys.argv[1]
    out = os.path.join(HERE, "t5_tokens_golden.json")
    if "--out" in sys.argv:
        out = sys.argv[sys.argv.index("--out") + 1]
    import tokenizers
    import transformers
    from transformers import T5TokenizerFast

    folder = tempfile.mkdtemp(prefix="t5_tokenizer_")
    blob = build_folder(folder)
    raw = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    fast = T5TokenizerFast.from_pretrained(folder)
    (flux_t5, sd3_t5), stubbed = import_comfy_tokenizers(os.path.abspath(comfy_dir), folder)
    g = {
        "generator": "tests/data/t5/make_t5_golden.py",
        "tokenizer_json_git_blob": blob,
        "versions": {"tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "stubbed_modules": stubbed,
        "tokenizers": [{"text": t, "ids": raw.encode(t).ids} for t in CORPUS],
        "transformers": [{"text": t, "ids": fast(t)["input_ids"]} for t in CORPUS],
        "comfyui_flux": [{"text": t, "rows": comfy_rows(flux_t5, t)} for t in CORPUS],
        "comfyui_sd3": [{"text": t, "rows": comfy_rows(sd3_t5, t)} for t in CORPUS[:SD3_COUNT]],
        "comfyui_flux_options": [
            {"text": t, "min_padding": p, "min_length": m,
             "rows": comfy_rows(flux_t5, t, tokenizer_options={"t5xxl_min_padding": p,
                                                               "t5xxl_min_length": m})}
            for t, p, m in OPTION_CASES],
    }
    differ = [e["text"] for e, f in zip(g["tokenizers"], g["transformers"]) if e["ids"] != f["ids"]]
    if differ:
        print("note: tokenizers and transformers differ on %d texts: %r" % (len(differ), differ))
    write_golden(out, g)
    shutil.rmtree(folder)
    print("wrote %s: %d texts (tokenizers %s, transformers %s; stubbed: %s)" % (
        out, len(CORPUS), tokenizers.__version__, transformers.__version__,
        ", ".join(g["stubbed_modules"]) or "none"))


if __name__ == "__main__":
    main()
