#!/usr/bin/env python3
"""Grapheme cluster cases for src/models/t5/grapheme.cpp, written to grapheme_cases.json beside
this file: random strings over code points of every Grapheme_Cluster_Break class, with the
cluster starts (code point indices) that the `regex` module's \\X gives (an independent UAX #29
implementation). No Indic virama is drawn: GB9c (Indic conjuncts), which grapheme.cpp leaves out
for the reason given there, never applies.

usage: make_grapheme_cases.py   (needs the `regex` module)
"""
import json
import os
import random

import regex

ALPHABET = [
    "\r", "\n", "\x07", "\u200b", "a", "Z", "1", " ", ".", "\u00e9", "\uff21", "\u4e2d",
    "\u0301", "\u0308", "\u20e3", "\ufe0f", "\u200d", "\u200c",            # Extend, ZWJ
    "\U0001F3FD", "\U0001F600", "\U0001F468", "\u2764", "\u00a9",          # emoji, ExtPict
    "\U0001F1E9", "\U0001F1EA", "\U0001F1EB",                              # Regional_Indicator
    "\u0600", "\u0903", "\u0e33", "\u0915",                                # Prepend, SpacingMark
    "\u1100", "\u1161", "\u11a8", "\uac00", "\uac01",                      # Hangul L V T LV LVT
]


def main():
    rng = random.Random(39)
    cases = []
    for _ in range(400):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8)))
        starts = []
        for m in regex.finditer(r"\X", s):
            starts.append(m.start())
        cases.append({"text": s, "starts": starts})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grapheme_cases.json")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]\n")
    print("wrote %s: %d cases (regex %s)" % (out, len(cases), regex.__version__))


if __name__ == "__main__":
    main()
