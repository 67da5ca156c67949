# Makes fp8_round_golden.bin: ComfyUI's own stochastic_rounding (comfy/float.py) on the CPU for
# float8_e4m3fn / float8_e5m2, its string_to_seed (comfy/model_patcher.py), and round-to-nearest-
# even fp8 conversions. Runs on torch 1.13 (no float8 dtypes) through the shim in fp8_shim.py; see README.md.
#
#   /usr/bin/python3 tests/data/fp8/make_fp8_round_golden.py /tmp/comfy tests/data/fp8/fp8_round_golden.bin
import math
import os
import struct
import sys

import torch

COMFY = sys.argv[1]
OUT = sys.argv[2]
sys.path.insert(0, COMFY)

# The shim (torch 1.13 only; check_with_torch2.py runs the same code with no shim) and the RNE
# expectations live in fp8_shim.py; importing it installs the shim.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp8_shim import E4M3, E5M2, check_log2_insensitive, fp8_grid, rne_expected  # noqa: E402

import comfy.float  # noqa: E402  (after the shim)

sys.path.insert(0, COMFY + "/comfy")
src = open(COMFY + "/comfy/model_patcher.py").read()
start = src.index("def string_to_seed(data):")
end = src.index("\ndef ", start + 1)
ns = {}
exec(src[start:end], ns)  # ComfyUI's string_to_seed, without importing the whole model_patcher
string_to_seed = ns["string_to_seed"]


def comfy_round(x, fmt, seed):
    out = comfy.float.stochastic_rounding(x, E4M3 if fmt == 0 else E5M2, seed=seed)
    out = out.real if out.is_complex() else out
    h = out.half()
    assert torch.equal(h.double(), out.double()) or torch.isnan(out).any()
    return h


def hash_input(n):  # the same deterministic input the C++ test builds
    idx = torch.arange(n, dtype=torch.int64)
    h = (idx * 2654435761) % (2 ** 32)
    return (h.double() / 2 ** 32 * 8 - 4).float()


def fnv1a64_half(h):
    """FNV-1a 64 over the half values' little-endian bytes, every NaN written as 0x7e00."""
    bits = h.contiguous().view(torch.int16).numpy().astype("<u2")
    bits[torch.isnan(h).numpy()] = 0x7E00
    acc = 0xCBF29CE484222325
    for b in bits.tobytes():
        acc = ((acc ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return acc


def special_values():
    v = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 0.25, 2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10,
         2.0 ** -14, 2.0 ** -15, 2.0 ** -16, 2.0 ** -17, 2.0 ** -24, 2.0 ** -25, -2.0 ** -9,
         448.0, 464.0, 479.0, 480.0, 500.0, -1000.0, 57344.0, 61440.0, 65504.0, 70000.0, 1e10,
         -1e10, float("inf"), float("-inf"), float("nan"), 3.0e-5, -3.0e-5, 0.1, -0.3, 1.9995,
         255.9, 3.9999, 7.99, 1e-8, -1e-8, 6.1e-5, 1.5, 1.75, 1.875, 1.9375, 0.001953125 * 3]
    return torch.tensor(v, dtype=torch.float32)


def spread(shape, gen_seed):
    g = torch.Generator().manual_seed(gen_seed)
    n = math.prod(shape)
    mag = torch.exp2(torch.rand(n, generator=g) * 36 - 26)  # 2^-26 .. 2^10
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    x = (mag * sign).reshape(shape)
    x.view(-1)[: min(n, 49)] = special_values()[: min(n, 49)]
    return x


KEYS = ["diffusion_model.input_blocks.1.1.proj_in.weight",
        "diffusion_model.middle_block.1.transformer_blocks.0.attn1.to_q.weight",
        "model.diffusion_model.out.2.weight",
        "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight",
        "", "a", "ü€𝄞"]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def rne_inputs():
    xs = set()
    for fmt in (0, 1):
        g = fp8_grid(fmt)
        for i, val in enumerate(g):
            xs.add(float(val))
            if i + 1 < len(g):
                mid = float((val + g[i + 1]) / 2)
                xs.update([mid, float(torch.tensor(mid).float().nextafter(torch.tensor(0.0)).item()),
                           float(torch.tensor(mid).float().nextafter(torch.tensor(1e30)).item())])
    xs.update([0.0, 1e-30, 2.0 ** -149, 1e30, float("inf"), float("nan"), 65535.0, 65536.0,
               479.99, 480.0, 449.0, 464.0, 465.0, 61439.0, 61440.0])
    gen = torch.Generator().manual_seed(7)
    xs.update(torch.exp2(torch.rand(64, generator=gen) * 40 - 24).tolist())
    out = []
    return sorted({f32(x) for x in xs if not math.isnan(x)}) + [float("nan")]  # C++ adds -x


# ---- write ---------------------------------------------------------------------------------------
def main():
    check_log2_insensitive()
    cases = []  # (name, fmt, seed, shape, input f32, output half or None, hash, samples)
    seeds = [string_to_seed(k) for k in KEYS[:4]]
    for fmt in (0, 1):
        for si, seed in enumerate(seeds):
            for shape in ([3, 5], [97]):
                x = spread(shape, 1000 * fmt + 10 * si + len(shape))
                cases.append(("full", fmt, seed, shape, x, comfy_round(x, fmt, seed)))
        # a 2-d weight-like shape, stored as a hash and samples to keep the file small
        x = hash_input(64 * 33).reshape(64, 33)
        cases.append(("hash_input", fmt, seeds[2], [64, 33], x, comfy_round(x, fmt, seeds[2])))
        # every half bit pattern (zeros, subnormals, powers of two, inf, NaN), 1-d
        allh = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
        cases.append(("all_halves", fmt, seeds[0], [65536], allh, comfy_round(allh, fmt, seeds[0])))
        # more than 4096*4096 elements: two slices (8188 and 5 rows), one generator across both
        shape = [8193, 2049]
        x = hash_input(8193 * 2049).reshape(shape)
        cases.append(("hash_input", fmt, seeds[1], shape, x, comfy_round(x, fmt, seeds[1])))

    with open(OUT, "wb") as f:
        f.write(b"HRF8GLD1")
        f.write(struct.pack("<I", len(KEYS)))
        for k in KEYS:
            kb = k.encode("utf-8")
            f.write(struct.pack("<I", len(kb)) + kb + struct.pack("<I", string_to_seed(k)))
        f.write(struct.pack("<I", len(cases)))
        for kind, fmt, seed, shape, x, h in cases:
            full = kind == "full"
            f.write(struct.pack("<BBI I", fmt, 1 if full else (2 if kind == "all_halves" else 3),
                                seed, len(shape)))
            f.write(struct.pack("<%dq" % len(shape), *shape))
            n = math.prod(shape)
            if full:
                f.write(x.contiguous().numpy().tobytes())
                f.write(h.contiguous().view(torch.int16).numpy().tobytes())
            else:
                hv = fnv1a64_half(h.reshape(-1))
                g = torch.Generator().manual_seed(seed)
                idx = sorted(set(torch.randint(0, n, (64,), generator=g).tolist() + [0, n - 1]))
                flat = h.reshape(-1).view(torch.int16).numpy()
                f.write(struct.pack("<QI", hv, len(idx)))
                for i in idx:
                    f.write(struct.pack("<qH", i, int(flat[i]) & 0xFFFF))
        rne = rne_inputs()
        f.write(struct.pack("<I", len(rne)))
        for x in rne:  # expected codes for x and for -x
            f.write(struct.pack("<fBBBB", x, rne_expected(x, 0), rne_expected(x, 1),
                                rne_expected(-x, 0), rne_expected(-x, 1)))
    print("torch", torch.__version__, "cases", len(cases), "rne", len(rne))


if __name__ == "__main__":
    main()
