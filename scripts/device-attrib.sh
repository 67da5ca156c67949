#!/usr/bin/env bash
# Which change moved a UNet step, in one device call (~5 min on a fresh H200): builds bench_models
# and bench_norms with CUDA, then times SD1.5 and SDXL steps (f16, captured replays) with every
# switchable optimisation on, and once with each of them off, in the same run:
#   HEADROOM_GEMM_SPLITK=0   split-K candidates in GEMM autotuning (Note [split-K for small GEMMs])
#   HEADROOM_CONV_FUSE=0     bias/residual inside cuDNN's convolution (Note [fused conv bias])
#   HEADROOM_GN_CLUSTER=0    single-pass group norm (Note [single-pass group norm])
#   HEADROOM_CUDNN_ATTENTION=0  cuDNN's fused attention (Note [cuDNN attention])
# and prints one table (ms per step and the difference against "all on"). bench_models builds its
# random-weight workloads each time (SDXL: ~60-90 s per run with autotuning), hence the generous
# timeouts. Logs go to $OUT; carry .debs (scripts/device-env.sh).
#   SWITCHES="HEADROOM_GEMM_SPLITK HEADROOM_CONV_FUSE" picks a subset; ONLY=sdxl one model.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
source scripts/device-env.sh
SWITCHES=${SWITCHES:-HEADROOM_GEMM_SPLITK HEADROOM_CONV_FUSE HEADROOM_GN_CLUSTER HEADROOM_CUDNN_ATTENTION}
ONLY=${ONLY:-unet}
STEPS=${STEPS:-20}
device_configure
device_build build.log bench_models bench_norms
rm -f "$OUT/configure.log"
# The machine's state, for judging noise between runs: SM clocks and the host's load.
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
cat /proc/loadavg
run() {  # label, env assignments...
  local label=$1
  shift
  env "$@" timeout 240 ./build-dev/bench/bench_models --device cuda --dtype f16 --only "$ONLY" \
    --steps "$STEPS" > "$OUT/attrib_$label.log" 2>&1
  echo "$label exit $?" >&2
  grep -E "^(SD1.5|SDXL) UNet step" "$OUT/attrib_$label.log" | sed "s/^/$label: /"
}
{
  run all_on X=1
  for s in $SWITCHES; do run "${s#HEADROOM_}_off" "$s=0"; done
} > "$OUT/attrib.txt"
python3 - "$OUT/attrib.txt" <<'PY' | tee "$OUT/attrib.md"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+): (.*?) f16: ([\d.]+) ms", line)
    if m:
        rows.setdefault(m[1], {})[m[2]] = float(m[3])
base = rows.get("all_on", {})
works = list(base)
print("| run | " + " | ".join(works) + " |")
print("|---|" + "---|" * len(works))
for label, r in rows.items():
    cells = []
    for w in works:
        ms = r.get(w)
        if ms is None:
            cells.append("-")
        elif label == "all_on":
            cells.append(f"{ms:.2f}")
        else:
            cells.append(f"{ms:.2f} ({ms - base[w]:+.2f})")
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
# Per-shape group norm (three kernels against the single pass) in the same run.
./build-dev/bench/bench_norms > "$OUT/bench_norms.log" 2>&1
tail -45 "$OUT/bench_norms.log"
