"""A workflow under VRAM budgets: Flux.1's (issue 39 item 6; scripts/device/flux-mem.sh) and
Z-Image's (issue 40 item 5; scripts/device/zimage.sh, --name zimage_mem).

For each budget (and each budget of --fp8, run with --fp8_e4m3fn-unet): `headroom plan --json`
for the predicted peak, then `headroom run` of the workflow, printing per run: completed or the
error, wall time, s/step (from the sampler's progress lines, the first step left out: it uploads),
the peak in both lenses (allocator level and driver level, as `headroom run` reports them), the
host peak RSS (the child's ru_maxrss) against the bytes of the model files the workflow loads, and
the plan's predicted peak against the run's allocator-level peak. Writes OUT/NAME.json; the
workflow copy, the images and one log per run go to --scratch (default OUT).

  python3 bench/flux_mem.py --headroom BIN --models-dir DIR --workflow WF --out OUT
      [--device cuda] [--budgets "24 12 8"] [--fp8 "8"] [--px 1024] [--steps 20]
      [--run-timeout 240] [--name flux_mem] [--scratch DIR] [--title "Flux.1-dev workflow"]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size_bytes(text):
    """headroom's bytes_format text ("12.34 GiB") as bytes; None when absent."""
    m = re.match(r"\s*([0-9.]+) (B|KiB|MiB|GiB|TiB)", text or "")
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def gib(b):
    return "-" if b is None else f"{b / (1 << 30):.2f}"


def workflow_for(path, px, steps, dst):
    """The workflow with EmptySD3LatentImage's size and KSampler's steps set, written to dst."""
    wf = json.load(open(path))
    for node in wf.values():
        if node["class_type"] == "EmptySD3LatentImage":
            node["inputs"].update(width=px, height=px)
        if node["class_type"] == "KSampler":
            node["inputs"]["steps"] = steps
    json.dump(wf, open(dst, "w"), indent=1)
    return dst, wf


def model_files(wf, models_dir):
    """The files the workflow's loaders name, found under the models folder, with their bytes."""
    names = set()
    for node in wf.values():
        for k in ("unet_name", "clip_name", "clip_name1", "clip_name2", "vae_name", "ckpt_name"):
            if k in node["inputs"]:
                names.add(node["inputs"][k])
    found = {}
    for root, _, files in os.walk(models_dir):
        for f in files:
            if f in names:
                found[f] = os.path.getsize(os.path.join(root, f))
    return found


def plan(args, wf_path, budget, fp8):
    cmd = [args.headroom, "plan", wf_path, "--models-dir", args.models_dir, "--device",
           args.device, "--vram-budget", f"{budget}GiB", "--json"] + fp8
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        return {"peak": None, "fits": None, "rc": None,
                "error": f"killed after --run-timeout {args.run_timeout} s"}
    try:
        j = json.loads(p.stdout)
        return {"peak": j.get("peak"), "fits": j.get("fits"), "rc": p.returncode}
    except json.JSONDecodeError:
        return {"peak": None, "fits": None, "rc": p.returncode,
                "error": (p.stderr.strip().splitlines() or ["no output"])[-1]}


def run(args, wf_path, budget, fp8, log_path):
    """One `headroom run`, its stderr read line by line with arrival times."""
    cmd = [args.headroom, "run", wf_path, "--models-dir", args.models_dir, "--device",
           args.device, "--vram-budget", f"{budget}GiB",
           "--output-dir", os.path.join(args.scratch, "images")] + fp8
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watchdog = threading.Timer(args.run_timeout, p.kill)  # one stuck run must not take the call
    watchdog.start()
    step_at = {}
    lines = []
    buf = b""
    while True:
        chunk = p.stdout.read1(65536) if hasattr(p.stdout, "read1") else p.stdout.read(1)
        if not chunk:
            break
        buf += chunk
        parts = re.split(rb"[\r\n]", buf)
        buf = parts.pop()
        now = time.monotonic() - t0
        for raw in parts:
            line = raw.decode(errors="replace")
            if not line:
                continue
            lines.append(f"[{now:8.2f}] {line}")
            m = re.search(r"KSampler.*\b(\d+)/(\d+) \[", line)
            if m:
                step_at.setdefault(int(m.group(1)), now)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    killed = not watchdog.is_alive() and wall >= args.run_timeout
    watchdog.cancel()
    if killed:
        lines.append(f"killed after --run-timeout {args.run_timeout} s")
    if buf:
        lines.append(buf.decode(errors="replace"))
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n" + "\n".join(lines) + "\n")
    text = "\n".join(lines)
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    r = {"rc": rc, "wall_s": wall, "rss_peak": usage.ru_maxrss * 1024}
    steps = sorted(step_at)
    if len(steps) >= 3:  # steady steps: from the end of step 1 to the end of the last
        r["s_per_step"] = (step_at[steps[-1]] - step_at[steps[0]]) / (steps[-1] - steps[0])
    m = re.search(r"allocator level: peak ([0-9.]+ \w+)", text)
    r["alloc_peak"] = size_bytes(m.group(1)) if m else None
    m = re.search(r"driver level \((.*?)\): peak ([0-9.]+ \w+) used of [0-9.]+ \w+ \((.*)\)", text)
    if m:
        r["driver_source"] = m.group(1)
        r["driver_peak"] = size_bytes(m.group(2))
        mp = re.search(r"this process ([0-9.]+ \w+)", m.group(3))
        r["driver_this_process"] = size_bytes(mp.group(1)) if mp else None
    fails = [ln for ln in lines if "failed" in ln or "error" in ln.lower()]
    r["completed"] = rc == 0 and "prompt executed" in text
    if not r["completed"]:
        r["error"] = (fails or lines or ["no output"])[-1][:400]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--headroom", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--workflow", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budgets", default="24 12 8")
    ap.add_argument("--fp8", default="8")
    ap.add_argument("--px", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--run-timeout", type=float, default=240,
                    help="seconds per headroom run (and per plan)")
    ap.add_argument("--name", default="flux_mem", help="OUT/NAME.json, NAME_run_*.log")
    ap.add_argument("--scratch", help="the workflow copy, images and run logs (default --out)")
    ap.add_argument("--title", default="Flux.1-dev workflow")
    args = ap.parse_args()
    args.scratch = args.scratch or args.out
    os.makedirs(os.path.join(args.scratch, "images"), exist_ok=True)
    wf_path, wf = workflow_for(args.workflow, args.px, args.steps,
                               os.path.join(args.scratch, f"{args.name}_workflow.json"))
    files = model_files(wf, args.models_dir)
    model_bytes = sum(files.values())
    print(f"model files: {', '.join(f'{k} {gib(v)} GiB' for k, v in sorted(files.items()))}; "
          f"{gib(model_bytes)} GiB together", flush=True)
    cases = [(b, False) for b in args.budgets.split()] + [(b, True) for b in args.fp8.split()]
    rows = []
    for budget, fp8 in cases:
        flags = ["--fp8_e4m3fn-unet"] if fp8 else []
        name = f"{budget} GiB" + (" fp8_e4m3fn-unet" if fp8 else "")
        t0 = time.monotonic()
        pl = plan(args, wf_path, budget, flags)
        pl["seconds"] = time.monotonic() - t0
        tag = f"{budget}gib{'_fp8' if fp8 else ''}"
        r = run(args, wf_path, budget, flags,
                os.path.join(args.scratch, f"{args.name}_run_{tag}.log"))
        r.update(case=name, budget_gib=float(budget), fp8=fp8, plan=pl)
        if pl.get("peak") and r.get("alloc_peak"):
            r["plan_vs_run"] = pl["peak"] / r["alloc_peak"]
        if model_bytes:
            r["rss_vs_models"] = r["rss_peak"] / model_bytes
        rows.append(r)
        print(f"{name}: {'completed' if r['completed'] else 'FAILED: ' + r.get('error', '')} "
              f"in {r['wall_s']:.1f} s (plan {pl['seconds']:.1f} s)",
              flush=True)
        json.dump({"model_files": files, "rows": rows},
                  open(os.path.join(args.out, f"{args.name}.json"), "w"), indent=1)
    ks = next((n["inputs"] for n in wf.values() if n["class_type"] == "KSampler"), {})
    print(f"\n{args.title} {args.px}x{args.px}, {args.steps} steps {ks.get('sampler_name')}/"
          f"{ks.get('scheduler')} cfg {ks.get('cfg')}, device {args.device}; model files "
          f"{gib(model_bytes)} GiB\n")
    print("| --vram-budget | result | wall s | s/step | allocator-level peak GiB | driver-level "
          "peak GiB (this process) | host peak RSS GiB | RSS / model files (goal <= 1.1x) | plan "
          "predicted GiB | plan / run (goal within 2 %) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        res = "completed" if r["completed"] else f"FAILED: {r.get('error', '')[:120]}"
        sps = f"{r['s_per_step']:.3f}" if "s_per_step" in r else "-"
        drv = f"{gib(r.get('driver_peak'))} ({gib(r.get('driver_this_process'))})"
        pv = f"{(r['plan_vs_run'] - 1) * 100:+.2f} %" if "plan_vs_run" in r else "-"
        rss = f"{r['rss_vs_models']:.3f}x" if "rss_vs_models" in r else "-"
        print(f"| {r['case']} | {res} | {r['wall_s']:.1f} | {sps} | {gib(r.get('alloc_peak'))} | "
              f"{drv} | {gib(r['rss_peak'])} | {rss} | {gib(r['plan'].get('peak'))} | {pv} |")
    print("\ns/step: the sampler's steady steps (from step 1's end to the last's, from the "
          "progress lines' arrival). Allocator level: headroom's own counters; driver level: as "
          "`headroom run` reports it (whole device, and this process). Host RSS: the run's "
          "ru_maxrss (mapped model pages it touched count). Plan: `headroom plan --json`'s peak "
          "for the same flags, against the run's allocator-level peak.")
    return 0 if all(r["completed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
