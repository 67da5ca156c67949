"""The CLIP BPE tokenizer (OpenAI vocabulary, the transformers 5 rule headroom implements) and
ComfyUI's SD1 77-token rows for prompts without weights.

Note [tokenizer rule]: NFC, every whitespace run -> one space, lower-case, split with the CLIP
pattern <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+
(whitespace dropped), bytes -> GPT-2's byte-to-unicode table, ranked merges with `</w>` on the
last symbol. Python's `re` has no \\p classes, so the split is a small scanner over
unicodedata categories (L* letters, N* numbers).
"""
import json
import os
import re
import unicodedata

BOS, EOS = 49406, 49407
MAX_LENGTH = 77
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "data", "clip_tokenizer")

_SPECIALS = ("<|startoftext|>", "<|endoftext|>")
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def _byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _is_letter(c):
    return unicodedata.category(c).startswith("L")


def _is_number(c):
    return unicodedata.category(c).startswith("N")


def split_pieces(text):
    """The CLIP pattern's matches, leftmost first, alternatives in the pattern's order."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        special = next((s for s in _SPECIALS if text.startswith(s, i)), None)
        contraction = next((s for s in _CONTRACTIONS if text.startswith(s, i)), None)
        if special or contraction:
            tok = special or contraction
        elif _is_letter(c):
            j = i
            while j < n and _is_letter(text[j]):
                j += 1
            tok = text[i:j]
        elif _is_number(c):
            tok = c
        elif c.isspace():
            i += 1
            continue
        else:
            j = i
            while j < n and not (text[j].isspace() or _is_letter(text[j]) or _is_number(text[j])):
                j += 1
            tok = text[i:j]
        out.append(tok)
        i += len(tok)
    return out


class CLIPBPE:
    def __init__(self, directory=DEFAULT_DIR):
        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:]
        merges = [tuple(l.split()) for l in lines if l.strip()]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.b2u = _byte_to_unicode()
        self.cache = {}

    def _bpe(self, piece):
        if piece in _SPECIALS:
            return [piece]
        word = [self.b2u[b] for b in piece.encode("utf-8")]
        word[-1] += "</w>"
        while len(word) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(word, word[1:]))]
            rank, _ = min(pairs)
            if rank == 1 << 30:
                break
            k = next(k for r, k in pairs if r == rank)
            first, second = word[k], word[k + 1]
            merged, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and word[k] == first and word[k + 1] == second:
                    merged.append(first + second)
                    k += 2
                else:
                    merged.append(word[k])
                    k += 1
            word = merged
        return word

    def encode(self, text):
        """Token ids of `text`, without BOS/EOS."""
        text = unicodedata.normalize("NFC", text)
        text = re.sub(r"\s+", " ", text).lower()
        ids = []
        for piece in split_pieces(text):
            if piece not in self.cache:
                self.cache[piece] = [self.vocab[s] for s in self._bpe(piece)]
            ids.extend(self.cache[piece])
        return ids

    def comfy_row(self, text):
        """ComfyUI's SD1 row for a prompt without weights or escapes: BOS, ids, EOS, EOS pads."""
        if any(c in text for c in "()\\") or text.startswith("embedding:"):
            raise ValueError(f"weighted prompts are not supported here: {text!r}")
        ids = self.encode(text)
        if len(ids) > MAX_LENGTH - 2:
            raise ValueError(f"prompt longer than one chunk ({len(ids)} tokens): {text!r}")
        row = [BOS] + ids + [EOS]
        return row + [EOS] * (MAX_LENGTH - len(row))


def check_golden(path):
    """Compares the plain BPE ids and ComfyUI's single-chunk rows with golden-tokenizer.json
    (prompts with weights, escapes or more than one chunk are left to headroom's own tests)."""
    tok, bad = CLIPBPE(), 0
    with open(path, encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    for p in prompts:
        want = p["hf_clip_tokenizer_input_ids"]
        want = want[0] if want and isinstance(want[0], list) else want
        ok = [BOS] + tok.encode(p["text"]) + [EOS] == want
        chunks = p["sd1_and_sdxl_clip_l"]["ids"]
        try:
            ok = ok and (len(chunks) != 1 or tok.comfy_row(p["text"]) == chunks[0])
        except ValueError:
            pass
        bad += not ok
        print(f"{p['name']:12s} {'ok' if ok else 'DIFFERENT'}")
    return bad


if __name__ == "__main__":
    import sys
    sys.exit(1 if check_golden(sys.argv[1]) else 0)
