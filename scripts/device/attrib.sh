# Which change moved a UNet step, in one device call (~8-9 min on a fresh H200: ~4 min of
# build, then ~100-120 s per bench_models run, three runs by default): builds bench_models
# and bench_norms with CUDA, then times SD1.5 and SDXL steps (f16, captured replays) with every
# switchable optimisation as it ships, and once with each switch flipped, in the same run:
#   HEADROOM_GEMM_SPLITK=0   split-K candidates in GEMM autotuning off (Note [split-K for small
#                            GEMMs])
#   HEADROOM_CONV_FUSE=0     bias/residual inside cuDNN's convolution off (Note [fused conv bias];
#                            on for channels-last convolutions by default)
#   HEADROOM_STACK_PROJECTIONS=0  stacked cross-attention K/V projections off (Note [stacked
#                            context projections])
#   HEADROOM_GN_CLUSTER=0    single-pass group norm off (Note [single-pass group norm])
#   HEADROOM_CUDNN_ATTENTION=0  cuDNN's fused attention off (Note [cuDNN attention])
#   HEADROOM_STACK_QKV=0     stacked self-attention Q/K/V projections off
# and the tuning knob:
#   HEADROOM_GEMM_CANDIDATES=32  autotuning times 32 of cuBLASLt's candidates, not 8
# (the short-key attention kernel, programmatic dependent launch and GEMM tile variants measured
# no gain and left the product: bench/PERF_NOTES.md, "Removed from the product")
# (set HEADROOM_GEMM_LOG=1 around the call to get each tuned GEMM's choice in attrib_runs.log)
# and prints one table (ms per step and the difference against the defaults). bench_models
# builds its random-weight workloads each time (SD1.5 and SDXL: ~100-120 s per run with
# autotuning; a 45 s limit was too short), hence the 150 s per run. Noise between runs of one
# call: ~0.1-0.2 ms on SDXL, so a switch needs the same sign in two calls before it counts;
# between calls the same defaults moved by up to 0.8 ms (29.94-30.75 ms, 2026-12-01). ONLY=sdxl
# runs take ~70-80 s (a call with the build, the CUDA op tests, bench_attention and four SDXL runs
# took 516 s). Logs go to $OUT (five files: build.log, attrib_runs.log, attrib.txt, attrib.md,
# bench_norms.log); carry .debs (scripts/device/env.sh).
#   FLIPS="HEADROOM_GEMM_SPLITK=0 HEADROOM_CONV_FUSE=0" picks a subset; ONLY=sdxl one model.
# Two flips by default: a fresh machine's build (~4 min) and four runs went past the 10-minute
# call limit on 2026-12-01 (each run took ~100-120 s); name others in FLIPS.
default_flips="HEADROOM_CONV_FUSE=0 HEADROOM_STACK_PROJECTIONS=0"
FLIPS=${FLIPS:-$default_flips}
ONLY=${ONLY:-unet}
STEPS=${STEPS:-10}
device_configure
device_build build.log bench_models bench_norms
rm -f "$OUT/configure.log"
# The machine's state, for judging noise between runs: SM clocks and the host's load.
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
cat /proc/loadavg
run() {  # label, env assignments...
  local label=$1 log=/tmp/hr_attrib_run.log
  shift
  env "$@" timeout 150 ./build-dev/bench/bench_models --device cuda --dtype f16 --only "$ONLY" \
    --steps "$STEPS" > "$log" 2>&1
  local rc=$?
  echo "$label exit $rc" >&2
  { echo "== $label (exit $rc)"; cat "$log"; } >> "$OUT/attrib_runs.log"
  grep -E "^(SD1.5|SDXL) UNet step" "$log" | sed "s/^/$label: /"
}
rm -f "$OUT/attrib_runs.log"
{
  run defaults X=1
  for f in $FLIPS; do run "${f#HEADROOM_}" "$f"; done
} > "$OUT/attrib.txt"
python3 - "$OUT/attrib.txt" <<'PY' | tee "$OUT/attrib.md"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+): (.*?) f16: ([\d.]+) ms", line)
    if m:
        rows.setdefault(m[1], {})[m[2]] = float(m[3])
base = rows.get("defaults", {})
works = list(base)
print("| run | " + " | ".join(works) + " |")
print("|---|" + "---|" * len(works))
for label, r in rows.items():
    cells = []
    for w in works:
        ms = r.get(w)
        if ms is None:
            cells.append("-")
        elif label == "defaults":
            cells.append(f"{ms:.2f}")
        else:
            cells.append(f"{ms:.2f} ({ms - base[w]:+.2f})")
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
# Per-shape group norm (three kernels against the single pass) in the same run.
./build-dev/bench/bench_norms > "$OUT/bench_norms.log" 2>&1
tail -45 "$OUT/bench_norms.log"
