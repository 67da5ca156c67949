#!/usr/bin/env python3
"""Writes nfc_cases.json: NFC by Python's unicodedata (the normalisation transformers' slow
tokenizers call) for every code point whose NFD differs from itself (a sample of the Hangul syllables), and for random strings of
starters, precomposed letters, combining marks and Hangul jamo (canonical reordering, blocking,
composition across marks). Code points are written as integers.

usage: python3 tests/data/unicode/make_nfc_golden.py --out tests/data/unicode/nfc_cases.json
"""
import argparse
import json
import random
import unicodedata


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    # Hangul syllables (arithmetic, 11,172 of them): every 101st.
    decomposable = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
                    and unicodedata.normalize("NFD", chr(cp)) != chr(cp)
                    and not (0xAC00 <= cp <= 0xD7A3 and (cp - 0xAC00) % 101)]
    marks = [cp for cp in range(0x300, 0x370)] + [0x1AB0, 0x1DC0, 0x20D0, 0x302A, 0x3099, 0x309A,
                                                    0x0CD5, 0x0B3E, 0x0BBE, 0x0DCA, 0x1D165, 0x1D16E]
    starters = [ord(c) for c in "aeiouAEOUnsyzKkw"] + [0x3B1, 0x3C9, 0x415, 0x1100, 0x1161,
                                                        0x11A8, 0xAC00, 0x0B47, 0x0BC6, 0x304B]
    rng = random.Random(20261204)
    pool = marks + starters + rng.sample(decomposable, 200)
    sequences = []
    for _ in range(300):
        s = "".join(chr(rng.choice(pool)) for _ in range(rng.randint(2, 6)))
        sequences.append(s)
    cases = [[[cp], [ord(c) for c in unicodedata.normalize("NFC", chr(cp))]] for cp in decomposable]
    cases += [[[ord(c) for c in s], [ord(c) for c in unicodedata.normalize("NFC", s)]]
              for s in sequences]
    doc = {"generator": "tests/data/unicode/make_nfc_golden.py",
           "unicodedata": unicodedata.unidata_version, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), args.out))


if __name__ == "__main__":
    main()
