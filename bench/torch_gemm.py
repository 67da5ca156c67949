"""PyTorch's F.linear at headroom's LINEAR shapes (issue 21): reads the JSON that bench_gemm
writes (--json; the SD1.5 512^2 and SDXL 1024^2 UNet steps' unique GEMM shapes, batch 2, f16,
with headroom's times), times the same shapes with PyTorch on the same GPU and prints one markdown
table of both with their ratios and the count-weighted totals per model. scripts/device.sh gemm
runs bench_gemm and then this.

Timing, as bench_gemm's: random f16 data of the same ranges, 3 warm-up calls, then enough calls
for ~20 ms of GPU time, between CUDA events. The main figures ("us") replay those calls captured
in one CUDA graph (headroom's steps replay a captured graph too), so host overhead counts on
neither side; "eager" is the same calls launched one by one (headroom's "stream").

What is timed per shape (x [M, K], w [N, K], bias [N], addend r [M, N]):
  linear   F.linear(x, w, bias): headroom's LINEAR without an addend (cuBLASLt, bias epilogue).
  +add     for rows with an addend (the residual that headroom's fusion pass folds into the GEMM
           as C with beta = 1): F.linear(x, w, bias) + r, two kernels as PyTorch eager runs it;
           this is the row's "torch us". Also torch.addmm(r, x, w.t()), one cuBLAS GEMM with
           beta = 1 but no bias (PyTorch has no single call for bias and addend): the GEMM +
           addend kernel alone, a lower bound for the bias rows.
  qkv      for self-attention q/k/v shapes: one F.linear of N = 3C against three of N = C.
The ratio hr/torch is headroom's time over PyTorch's: above 1 headroom is slower.

PyTorch may use reduced-precision (f16) reductions in split-K GEMMs by default
(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction); headroom accumulates in f32
throughout. TORCH_FP16_REDUCTION=0 or 1 sets it; unset keeps PyTorch's default (printed).
Usage: python3 bench/torch_gemm.py gemm.json > gemm_compare.md
"""
import json, math, os, sys, time

TARGET_MS = 20.0
MIN_REPS, MAX_REPS = 10, 2000


def log(msg):
    print(f"[torch_gemm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def reps_for(torch, fn):
    """Warm-up, then the number of calls that take ~TARGET_MS."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    return max(MIN_REPS, min(MAX_REPS, int(TARGET_MS / one)))


def time_us(torch, fn):
    """(captured us, eager us) per call of fn."""
    reps = reps_for(torch, fn)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    eager = s.elapsed_time(e) * 1e3 / reps
    try:
        # Warm-up on a side stream, as torch.cuda.graph asks, then capture reps calls.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        g.replay()
        s.record()
        for _ in range(3):
            g.replay()
        e.record()
        e.synchronize()
        captured = s.elapsed_time(e) * 1e3 / (3 * reps)
        del g
    except Exception as ex:  # noqa: BLE001 - report and use the eager time
        log(f"capture failed ({ex}); using the eager time")
        captured = eager
    return captured, eager


def rand(torch, shape, scale):
    return (torch.rand(shape, device="cuda", dtype=torch.float32) * 2 - 1).mul_(scale).half()


def time_shape(torch, F, s):
    m, n, k = s["m"], s["n"], s["k"]
    x = rand(torch, (m, k), 1.0)
    w = rand(torch, (n, k), 1.0 / math.sqrt(k))
    b = rand(torch, (n,), 0.1) if s["bias"] else None
    out = {}
    out["linear"] = time_us(torch, lambda: F.linear(x, w, b))
    if s["addend"]:
        r = rand(torch, (m, n), 1.0)
        out["linear_add"] = time_us(torch, lambda: F.linear(x, w, b) + r)
        wt = w.t()
        out["addmm"] = time_us(torch, lambda: torch.addmm(r, x, wt))
    if s.get("qkv_triples", 0) > 0:
        w3 = rand(torch, (3 * n, k), 1.0 / math.sqrt(k))
        out["qkv_fused"] = time_us(torch, lambda: F.linear(x, w3))
    torch.cuda.synchronize()
    return out


def tflops(flop, us):
    return flop / (us * 1e6) if us > 0 else 0.0


def flags(s):
    return ("bias" if s["bias"] else "-") + ("+add" if s["addend"] else "")


def main():
    if len(sys.argv) != 2:
        print("usage: python3 bench/torch_gemm.py GEMM_JSON (from bench_gemm --json)")
        return 2
    try:
        with open(sys.argv[1]) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"torch_gemm: cannot read {sys.argv[1]}: {e}")
        return 1
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch_gemm: PyTorch is not installed here ({e}); nothing to compare")
        return 1
    if not torch.cuda.is_available():
        print(f"torch_gemm: PyTorch {torch.__version__} sees no CUDA device; nothing to compare")
        return 1
    red = os.environ.get("TORCH_FP16_REDUCTION")
    if red in ("0", "1"):
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = red == "1"
    torch.manual_seed(1234)

    shapes = data["shapes"]
    for i, s in enumerate(shapes):
        try:
            s["torch"] = time_shape(torch, F, s)
        except Exception as e:  # noqa: BLE001 - report and go on with the rest
            log(f"{s['model']} M={s['m']} N={s['n']} K={s['k']}: {e}")
            s["torch"] = {}
        if (i + 1) % 10 == 0:
            log(f"{i + 1}/{len(shapes)} shapes")

    p = print
    p(f"## LINEAR: headroom (bench_gemm) against PyTorch {torch.__version__} F.linear, "
      f"{torch.cuda.get_device_name(0)}, f16\n")
    p("Per unique shape of one UNet step (batch 2). us = captured replay (host overhead off on "
      "both sides); hr/torch > 1: headroom slower. torch us = F.linear, + r for +add rows (two "
      "kernels). no-add: the same GEMM without the addend on each side (the kernel choice "
      "alone); addmm: torch.addmm(r, x, w.t()), GEMM + addend in one cuBLAS call, no bias. "
      "fp16 reduced-precision reduction in PyTorch: "
      f"{torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}. "
      f"headroom's in-run 8192^3 LINEAR: {data.get('ceiling_tflops_in_run', 0):.0f} TF/s.\n")
    p("| model | count | M | N | K | flags | hr us | torch us | hr/torch | hr TF/s | torch TF/s "
      "| hr eager | torch eager | hr no-add | torch no-add | no-add hr/torch | torch addmm |")
    p("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals, failed = {}, []
    for s in shapes:
        t = s["torch"]
        same = t.get("linear_add" if s["addend"] else "linear")
        if not same:
            p(f"| {s['model']} | {s['count']} | {s['m']} | {s['n']} | {s['k']} | {flags(s)} "
              f"| {s['us']:.2f} | failed | | | | | | | | | |")
            failed.append(f"{s['model']} {s['count']} x {s['m']}x{s['n']}x{s['k']}")
            continue
        flop = 2.0 * s["m"] * s["n"] * s["k"]
        hr_gemm = s["us_no_addend"] if s["addend"] else s["us"]
        th_gemm = t["linear"][0]
        addmm = f"{t['addmm'][0]:.2f}" if "addmm" in t else ""
        noadd = (f"{hr_gemm:.2f} | {th_gemm:.2f} | {hr_gemm / th_gemm:.2f}" if s["addend"]
                 else " | | ")
        p(f"| {s['model']} | {s['count']} | {s['m']} | {s['n']} | {s['k']} | {flags(s)} "
          f"| {s['us']:.2f} | {same[0]:.2f} | {s['us'] / same[0]:.2f} "
          f"| {tflops(flop, s['us']):.0f} | {tflops(flop, same[0]):.0f} "
          f"| {s['us_stream']:.2f} | {same[1]:.2f} | {noadd} | {addmm} |")
        tot = totals.setdefault(s["model"], dict.fromkeys(
            ("nodes", "flop", "hr", "th", "hr_eager", "th_eager", "hr_gemm", "th_gemm",
             "qkv_hr_sep", "qkv_hr_fused", "qkv_th_sep", "qkv_th_fused"), 0.0))
        c = s["count"]
        tot["nodes"] += c
        tot["flop"] += c * flop
        tot["hr"] += c * s["us"]
        tot["th"] += c * same[0]
        tot["hr_eager"] += c * s["us_stream"]
        tot["th_eager"] += c * same[1]
        tot["hr_gemm"] += c * hr_gemm
        tot["th_gemm"] += c * th_gemm
        if s.get("qkv_triples", 0) > 0 and "qkv_fused" in t:
            q = s["qkv_triples"]
            tot["qkv_hr_sep"] += q * 3 * s["us"]
            tot["qkv_hr_fused"] += q * s["us_qkv_fused"]
            tot["qkv_th_sep"] += q * 3 * t["linear"][0]
            tot["qkv_th_fused"] += q * t["qkv_fused"][0]

    p("\n### Per UNet step (count-weighted, ms)\n")
    p("| model | nodes | TFLOP | hr ms | torch ms | hr/torch | hr TF/s | torch TF/s | hr eager "
      "| torch eager | GEMM only: hr | torch | hr/torch | at 761 TF/s |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model, t in totals.items():
        p(f"| {model} | {int(t['nodes'])} | {t['flop'] / 1e12:.2f} | {t['hr'] / 1e3:.3f} "
          f"| {t['th'] / 1e3:.3f} | {t['hr'] / t['th']:.2f} | {tflops(t['flop'], t['hr']):.0f} "
          f"| {tflops(t['flop'], t['th']):.0f} | {t['hr_eager'] / 1e3:.3f} "
          f"| {t['th_eager'] / 1e3:.3f} | {t['hr_gemm'] / 1e3:.3f} | {t['th_gemm'] / 1e3:.3f} "
          f"| {t['hr_gemm'] / t['th_gemm']:.2f} | {t['flop'] / 761e12 * 1e3:.3f} |")
    if failed:
        p(f"\nLeft out of the totals (PyTorch failed; see the log): {', '.join(failed)}")
    p("\nGEMM only: every shape without its addend on both sides (headroom's kernel choice "
      "against PyTorch's).\n")
    p("### Fused self-attention q/k/v (one GEMM of N = 3C against three of N = C), ms per step\n")
    p("| model | hr 3 separate | hr fused | hr fused/sep | torch 3 separate | torch fused "
      "| torch fused/sep |")
    p("|---|---:|---:|---:|---:|---:|---:|")
    for model, t in totals.items():
        if t["qkv_hr_sep"] > 0 and t["qkv_th_sep"] > 0:
            p(f"| {model} | {t['qkv_hr_sep'] / 1e3:.3f} | {t['qkv_hr_fused'] / 1e3:.3f} "
              f"| {t['qkv_hr_fused'] / t['qkv_hr_sep']:.2f} | {t['qkv_th_sep'] / 1e3:.3f} "
              f"| {t['qkv_th_fused'] / 1e3:.3f} | {t['qkv_th_fused'] / t['qkv_th_sep']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
