# The torch 1.13 shim for ComfyUI's fp8 stochastic_rounding (README.md, "The shim") and the exact
# round-to-nearest-even fp8 conversions, shared by make_fp8_round_golden.py and
# ../lora/fp8/make_fp8_lora_golden.py. Importing this module installs the shim; import it before
# comfy.float. Moved here verbatim from make_fp8_round_golden.py (its output is byte-identical).
import math
import types
from fractions import Fraction

import torch

# ---- shim (torch 1.13 only; check_with_torch2.py runs the same code with no shim) -------------
# 1. float8 dtypes do not exist: stand-in dtypes that hold every value of the result exactly.
#    stochastic_rounding only compares the dtype, asks torch.finfo for its range and copies the
#    (already fp8-valued) result into an empty_like of it.
E4M3, E5M2 = torch.float64, torch.complex128
torch.float8_e4m3fn, torch.float8_e5m2 = E4M3, E5M2
_finfo = torch.finfo
FP8_RANGE = {E4M3: 448.0, E5M2: 57344.0}


def finfo(dtype):
    if dtype in FP8_RANGE:
        return types.SimpleNamespace(min=-FP8_RANGE[dtype], max=FP8_RANGE[dtype])
    return _finfo(dtype)


torch.finfo = finfo


# 2. torch 1.13's CPU has no float16 kernels for log2, floor and clamp ("not implemented for
#    'Half'"). torch 2.x computes them in float32 and rounds to half; so does the shim. floor and
#    clamp are exact that way; log2's half result does not depend on which float32 log2 is used
#    (checked over every positive finite half: floor(half(log2)) is the same for +-1 float ulp).
def _via_float(fn):
    def op(t, *args, out=None, **kw):
        if isinstance(t, torch.Tensor) and t.dtype == torch.float16:
            r = fn(t.float(), *args, **kw).half()
            if out is not None:
                out.copy_(r)
                return out
            return r
        return fn(t, *args, out=out, **kw) if out is not None else fn(t, *args, **kw)
    return op


def check_log2_insensitive():
    """floor(half(log2 x)) for every positive finite half is the same whichever float32 log2
    (correctly rounded or 1 ulp off either way) torch uses, so the shim's log2 cannot differ."""
    import numpy as np
    x = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    l32 = np.log2(x).astype(np.float32)
    fl = lambda a: np.floor(a.astype(np.float16).astype(np.float64))  # noqa: E731
    for near in (np.nextafter(l32, np.float32(-np.inf)), np.nextafter(l32, np.float32(np.inf))):
        assert (fl(near) == fl(l32)).all()
    assert (fl(torch.log2(torch.from_numpy(x.astype(np.float32))).numpy()) == fl(l32)).all()


torch.log2 = _via_float(torch.log2)
torch.floor = _via_float(torch.floor)
torch.clamp = _via_float(torch.clamp)
_tfloor = torch.Tensor.floor
torch.Tensor.floor = lambda t: _tfloor(t.float()).half() if t.dtype == torch.float16 else _tfloor(t)
# ------------------------------------------------------------------------------------------------

# ---- RNE conversion expectations, from the formats' definitions (exact rationals) ------------
def fp8_grid(fmt):
    eb, mb, bias = (4, 3, 7) if fmt == 0 else (5, 2, 15)
    vals = []
    for code in range(0x80):
        e, m = code >> mb, code & ((1 << mb) - 1)
        if e == 0:
            vals.append(Fraction(m, 1 << mb) * Fraction(2) ** (1 - bias))
        else:
            vals.append((1 + Fraction(m, 1 << mb)) * Fraction(2) ** (e - bias))
    # e4m3fn: code 0x7f is NaN, its would-be value 480 is the overflow boundary's upper end;
    # e5m2: codes 0x7c.. are inf/NaN; 0x7c stands for 65536 (rounds to inf).
    return vals[: 0x80] if fmt == 0 else vals[: 0x7D]


def rne_expected(v, fmt):
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    if math.isnan(v):
        return 0x7F | sign
    a = abs(v)
    grid = fp8_grid(fmt)
    top = grid[-1]  # 480 (e4m3fn) or 65536 (e5m2)
    if math.isinf(a) or Fraction(a) >= top:
        return (0x7F if fmt == 0 else 0x7C) | sign  # e4m3fn: NaN; e5m2: inf
    fa = Fraction(a)
    best = min(range(len(grid)), key=lambda c: (abs(grid[c] - fa), c & 1))
    return best | sign
