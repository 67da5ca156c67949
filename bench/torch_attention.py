#!/usr/bin/env python3
"""PyTorch's attention kernels on the shapes of bench/bench_attention.cpp (issue 21).

Times torch.nn.functional.scaled_dot_product_attention with each SDPA backend PyTorch offers on
this GPU (FlashAttention-2, cuDNN's fused attention, memory-efficient) at the SD1.5 and SDXL UNet
attention shapes (batch 2, f16), as CUDA-graph replays so that launch overhead is off, and prints
one markdown table with TFLOP/s and the per-UNet-step totals (layers x time), to set beside
bench_attention's figures for headroom's kernel from the same run.

    python3 bench/torch_attention.py [--dtype f16|bf16] [--reps 50]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# name, queries, keys, heads, head dim, layers per UNet step, model (as in bench_attention.cpp)
SHAPES = [
    ("sd15 self 4096 d40 h8", 4096, 4096, 8, 40, 5, "sd15"),
    ("sd15 cross 4096x77 d40", 4096, 77, 8, 40, 5, "sd15"),
    ("sd15 self 1024 d80 h8", 1024, 1024, 8, 80, 5, "sd15"),
    ("sd15 cross 1024x77 d80", 1024, 77, 8, 80, 5, "sd15"),
    ("sd15 self 256 d160 h8", 256, 256, 8, 160, 5, "sd15"),
    ("sd15 cross 256x77 d160", 256, 77, 8, 160, 5, "sd15"),
    ("sd15 mid self 64 d160", 64, 64, 8, 160, 1, "sd15"),
    ("sd15 mid cross 64x77 d160", 64, 77, 8, 160, 1, "sd15"),
    ("sdxl self 4096 d64 h10", 4096, 4096, 10, 64, 10, "sdxl"),
    ("sdxl cross 4096x77 d64", 4096, 77, 10, 64, 10, "sdxl"),
    ("sdxl self 1024 d64 h20", 1024, 1024, 20, 64, 60, "sdxl"),
    ("sdxl cross 1024x77 d64", 1024, 77, 20, 64, 60, "sdxl"),
]
BACKENDS = [
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
]
BATCH = 2


def time_us(fn, reps):
    """Median microseconds of one call, replayed from a CUDA graph of `reps` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dt = torch.float16 if args.dtype == "f16" else torch.bfloat16
    torch.manual_seed(0)
    print(f"## PyTorch {torch.__version__} SDPA backends, {torch.cuda.get_device_name()}, "
          f"{args.dtype}, batch {BATCH}, CUDA-graph replays\n")
    print("| shape | layers | " + " | ".join(f"{n} us | {n} TF/s" for n, _ in BACKENDS) + " |")
    print("|---|---:|" + "---:|---:|" * len(BACKENDS))
    totals = {}
    for name, nq, nk, h, d, layers, model in SHAPES:
        q = torch.randn(BATCH, h, nq, d, device="cuda", dtype=dt)
        k = torch.randn(BATCH, h, nk, d, device="cuda", dtype=dt)
        v = torch.randn(BATCH, h, nk, d, device="cuda", dtype=dt)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        flop = 4.0 * BATCH * h * nq * nk * d
        cells = []
        for bname, backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, k, v)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    if err > 2e-2:
                        raise RuntimeError(f"rel err {err:.1e}")
                    us = time_us(lambda: F.scaled_dot_product_attention(q, k, v), args.reps)
                cells.append(f"{us:.1f} | {flop / us / 1e6:.0f}")
                key = (model, bname)
                totals[key] = totals.get(key, 0.0) + us * layers
            except Exception as e:  # a backend that does not take this shape
                cells.append(f"- | {str(e).splitlines()[0][:40]}")
                totals[(model, bname)] = float("nan")
        print(f"| {name} | {layers} | " + " | ".join(cells) + " |")
    print("\nPer UNet step (layers x time), ms: " + "; ".join(
        f"{m} {b} {t / 1e3:.2f}" for (m, b), t in sorted(totals.items())))


if __name__ == "__main__":
    main()
