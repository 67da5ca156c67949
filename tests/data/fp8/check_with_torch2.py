# Checks fp8_round_golden.bin against ComfyUI's stochastic_rounding run with a real torch float8
# dtype (torch >= 2.1, no shim at all), on the CPU, and torch's own RNE .to(float8) casts.
# The golden was made on torch 1.13 through a shim (README.md); this is the check that torch 2.x
# gives the same values. Exit status 0 when everything matches.
#
#   python3 tests/data/fp8/check_with_torch2.py /path/to/ComfyUI tests/data/fp8/fp8_round_golden.bin
import math
import struct
import sys

import torch

COMFY, GOLDEN = sys.argv[1], sys.argv[2]
sys.path.insert(0, COMFY)
import comfy.float  # noqa: E402

src = open(COMFY + "/comfy/model_patcher.py").read()
start = src.index("def string_to_seed(data):")
ns = {}
exec(src[start:src.index("\ndef ", start + 1)], ns)
string_to_seed = ns["string_to_seed"]

FMT = {0: torch.float8_e4m3fn, 1: torch.float8_e5m2}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def get(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def raw(self, n):
        b = self.d[self.p:self.p + n]
        self.p += n
        return b


def canonical(h):  # float16 tensor -> uint16 list with every NaN as 0x7e00
    bits = h.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    bits[torch.isnan(h)] = 0x7E00
    return bits


def fnv1a64(bits):
    acc = 0xCBF29CE484222325
    for b in bits.to(torch.int16).numpy().astype("<u2").tobytes():
        acc = ((acc ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return acc


def case_input(kind, shape):
    n = math.prod(shape)
    if kind == 2:
        return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    idx = torch.arange(n, dtype=torch.int64)
    return ((idx * 2654435761) % (2 ** 32)).double().div(2 ** 32).mul(8).sub(4).float().reshape(shape)


def main():
    r = Reader(open(GOLDEN, "rb").read())
    assert r.raw(8) == b"HRF8GLD1"
    bad = 0
    for _ in range(r.get("I")):
        key = r.raw(r.get("I")).decode("utf-8")
        seed = r.get("I")
        if string_to_seed(key) != seed:
            bad += 1
            print("string_to_seed mismatch", repr(key))
    for _ in range(r.get("I")):
        fmt, kind, seed, ndim = r.get("BBII")
        shape = list(r.get("%dq" % ndim)) if ndim > 1 else [r.get("q")]
        n = math.prod(shape)
        if kind == 1:
            x = torch.frombuffer(bytearray(r.raw(4 * n)), dtype=torch.float32).reshape(shape)
            want = torch.frombuffer(bytearray(r.raw(2 * n)), dtype=torch.int16).view(torch.float16)
        else:
            x = case_input(kind, shape)
            hv, count = r.get("QI")
            samples = [r.get("qH") for _ in range(count)]
        got = comfy.float.stochastic_rounding(x, FMT[fmt], seed=seed).to(torch.float16).reshape(-1)
        gb = canonical(got)
        if kind == 1:
            diff = (gb != canonical(want.reshape(-1))).sum().item()
        else:
            diff = sum(int(gb[i]) != (0x7E00 if math.isnan(struct.unpack("<e", struct.pack("<H", h))[0]) else h)
                       for i, h in samples)
            diff += fnv1a64(gb) != hv
        print("case fmt %d kind %d seed %d shape %s: %s" % (fmt, kind, seed, shape, "ok" if diff == 0 else "%d MISMATCHES" % diff))
        bad += diff
    for _ in range(r.get("I")):
        x, e4, e5, ne4, ne5 = r.get("fBBBB")
        t = torch.tensor([x, -x], dtype=torch.float32)
        got = [t.to(FMT[0]).view(torch.uint8).tolist(), t.to(FMT[1]).view(torch.uint8).tolist()]
        if got != [[e4, ne4], [e5, ne5]]:
            bad += 1
            print("RNE mismatch", x, got, [[e4, ne4], [e5, ne5]])
    print("torch", torch.__version__, "->", "ALL MATCH" if bad == 0 else "%d MISMATCHES" % bad)
    sys.exit(0 if bad == 0 else 1)


if __name__ == "__main__":
    main()
