# Same-run comparison with PyTorch (issue 21) in one device call (5-7 min on a fresh H200):
# builds bench_models, times headroom's SD1.5 512^2 and SDXL 1024^2 UNet steps (batch 2) and SD
# VAE decodes in f16 and bf16, times PyTorch eager and torch.compile on the same work
# (bench/torch_peer.py) and prints one markdown table of both with their ratios. With TESTS=1
# (the default) it also runs the CUDA op tests (every harness case, and the full-size production
# cases of op_cuda_production_test.cpp) while the peer compiles. Logs and JSON go to $OUT (8
# files).
#
# Before the device call, here: `scripts/device.sh compare:prepare` copies diffusers' source
# from ../shared/peers/diffusers into the git-ignored bench/peers/; the call carries
# bench/peers and .debs (scripts/device/env.sh).
#
# Timeline with SERIAL=0: the peer builds and compiles its models (torch.compile of SDXL takes minutes, on the
# CPU) while headroom builds, tests and benchmarks; the peer's compile runs at a lower CPU
# priority and its timing waits until bench_models has finished, so each side times with the GPU
# to itself. Only the peer's few warm-up calls may overlap headroom's timed runs (medians of 20);
# the driver-level memory in bench_models.log counts the peer's process too.
# SERIAL=2 (the default since 2026-12-01, fourth session): the peer starts before the build and
# compiles while headroom builds and tests (untimed work), but bench_models waits for the peer's
# phase 1 to end (compile and its GPU warm-up, at most PEER_READY_WAIT=420 s), and the peer times
# only after bench_models, so neither side's timing overlaps the other's GPU work. Measured on a
# fresh H200 with DTYPES=f16: 297 s with TESTS=0 (bench_models waited 136 s for the peer), 427 s
# with TESTS=1 (waited 142 s). SERIAL=1 runs the two strictly one after the other and does not fit
# one 10-minute call with TESTS=1 and an EXTRA_CMD (the peer was killed while compiling SDXL, 600 s
# in, on 2026-12-01). SERIAL=0 overlaps the peer's compile with headroom's timing (PyTorch's
# figures came out noisy that way: eager SD1.5 45.1 ms against 25.1 in a serial run).
#   DTYPES=f16,bf16 (headroom and PyTorch eager)  COMPILE_DTYPES=f16  COMPILE=full|regional|off
#   STEPS=20 (headroom timed runs)  ITERS=10 (PyTorch timed steps)  TESTS=1|0  STREAMING=0|1
#   EXTRA_TARGETS="bench_norms hr_tests_models" EXTRA_CMD='...': more targets to build and a
#   command run after the tests while the peer compiles, its output in $OUT/extra.log (then
#   configure.log is not kept: at most 8 files come back); EXTRA_GREP picks the lines to print.
PEER_SRC=bench/peers/diffusers/src
if [ "${1:-}" = prepare ]; then
  from=${SHARED_PEERS:-../shared/peers}
  [ -d "$from/diffusers/src" ] || { echo "no $from/diffusers/src to copy"; exit 1; }
  rm -rf bench/peers/diffusers && mkdir -p bench/peers && cp -r "$from/diffusers" bench/peers/ &&
    chmod -R u+w bench/peers && find bench/peers -name __pycache__ -prune -exec rm -rf {} + &&
    echo "bench/peers/diffusers ready ($(du -sh bench/peers | cut -f1)); carry bench/peers"
  exit $?
fi
DTYPES=${DTYPES:-f16,bf16}
COMPILE_DTYPES=${COMPILE_DTYPES:-f16}
COMPILE=${COMPILE:-full}
STEPS=${STEPS:-20}
SERIAL=${SERIAL:-2}
PEER_READY_WAIT=${PEER_READY_WAIT:-420}  # SERIAL=2: longest wait (s) for the peer's phase 1
TESTS=${TESTS:-1}
STREAMING=${STREAMING:-0}  # 1: also bench_streaming (issue 15) while the peer compiles
TEST_FILTER=${TEST_FILTER:-*Cuda*}  # which CUDA op tests TESTS=1 runs (all by default)
GO="/tmp/hr_peer_go.$$"  # not under $OUT: at most 8 files come back from there
READY="/tmp/hr_peer_ready.$$"
rm -f "$GO" "$READY" "$OUT/peer_torch.json" "$OUT/bench_models.json"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2

peer_start() {
  if [ ! -d "$PEER_SRC/diffusers" ]; then
    echo "no $PEER_SRC/diffusers: run 'scripts/device.sh compare:prepare' before the call" \
      "and carry bench/peers; PyTorch columns stay empty" | tee "$OUT/peer_torch.log"
    return
  fi
  OUT="$OUT" DTYPES="$DTYPES" COMPILE_DTYPES="$COMPILE_DTYPES" COMPILE="$COMPILE" GO_FILE="$GO" \
    READY_FILE="$READY" PYTHONPATH="$PWD/$PEER_SRC${PYTHONPATH:+:$PYTHONPATH}" \
    PYTHONUNBUFFERED=1 nice -n 10 python3 bench/torch_peer.py > "$OUT/peer_torch.log" 2>&1 &
  peer=$!
}
peer=""
peer_stop() {  # on any exit (e.g. a failed configure) while the peer still runs
  [ -n "$peer" ] && { disown "$peer"; kill "$peer"; } 2> /dev/null
  rm -f "$GO" "$READY"
}
trap peer_stop EXIT
# SERIAL=0 and 2: the peer builds and compiles its models while headroom builds (and tests); with
# 2, headroom's benchmark also waits until the peer's phase 1 (compile and GPU warm-up) is done.
if [ "$SERIAL" != 1 ]; then peer_start; fi

device_configure
ninja -C build-dev -j"$(nproc)" bench_models $([ "$TESTS" = 1 ] && echo hr_tests_backend) \
  $([ "$STREAMING" = 1 ] && echo bench_streaming) ${EXTRA_TARGETS:-} \
  > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"

tests_rc=0
if [ "$TESTS" = 1 ]; then
  ./build-dev/tests/hr_tests_backend --gtest_filter="$TEST_FILTER" > "$OUT/cuda_tests.log" 2>&1
  tests_rc=$?
  echo "CUDA op tests exit $tests_rc (harness and production cases; errors per case in cuda_tests.log)"
  grep -E "^op harness: |^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test" "$OUT/cuda_tests.log"
  grep -E "^\[  FAILED  \] .*(MatchesReference|MatchesCpuF32|CudaBackend)" "$OUT/cuda_tests.log" |
    sed 's/, where GetParam.*//' | sort -u | head -20
  # The cases closest to their tolerances (what to look at before tightening or loosening one).
  python3 - "$OUT/cuda_tests.log" <<'PY'
import re, sys
pat = re.compile(r"^  (\S+) \[\S+ (\S+)\].*rel L2 (\S+) \(tol (\S+)\), max abs \S+ = (\S+) of max \|ref\| \S+ \(tol (\S+)\)")
rows = []
for line in open(sys.argv[1], errors="replace"):
    m = pat.match(line)
    if m and float(m[4]) > 0:
        name, dt, l2, tl2, mx, tmx = m[1], m[2], *map(float, m.groups()[2:])
        rows.append((max(l2 / tl2, mx / tmx), name, dt, l2, tl2, mx, tmx))
print("closest to tolerance (error / tol): case dtype, rel L2 (tol), rel max (tol)")
for r in sorted(rows, reverse=True)[:12]:
    print(f"  {r[0]:.2f}  {r[1]} {r[2]}: {r[3]:.3g} ({r[4]:.3g}), {r[5]:.3g} ({r[6]:.3g})")
PY
fi

if [ "$STREAMING" = 1 ]; then  # issue 15's streaming rows (SDXL), while the peer still compiles
  # Twice: as is, and with more hardware queues per context (CUDA_DEVICE_MAX_CONNECTIONS, read
  # when the context is made): whether the copy stream shares one with the compute stream.
  for conn in default 32; do
    env $([ "$conn" = default ] || echo CUDA_DEVICE_MAX_CONNECTIONS=$conn) timeout 200 \
      ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps 8 --only sdxl \
      > /tmp/hr_streaming_$conn.log 2>&1
    echo "bench_streaming (CUDA_DEVICE_MAX_CONNECTIONS $conn) exit $?"
    grep -E "^\| SDXL|timed step|compute waits" /tmp/hr_streaming_$conn.log | cut -c1-230
  done
fi

if [ -n "${EXTRA_CMD:-}" ]; then  # while the peer still compiles
  bash -c "$EXTRA_CMD" > "$OUT/extra.log" 2>&1
  echo "extra command exit $?"
  grep -E "${EXTRA_GREP:-.}" "$OUT/extra.log" | cut -c1-200 | head -60
  rm -f "$OUT/configure.log"
fi

# The machine's state before each side times (SM clock, host load): a run whose PyTorch eager
# figures doubled (2026-12-01, call 9: SDXL eager 114.7 ms against 57.4 the day before, headroom's
# uncaptured steps 15-28 % slower) had a slow or busy host; these lines say so next time.
machine_state() {
  echo "machine before $1: $(nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | head -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
}
if [ "$SERIAL" = 2 ] && [ -n "$peer" ]; then
  waited=0
  while [ ! -f "$READY" ] && kill -0 "$peer" 2> /dev/null && [ "$waited" -lt "$PEER_READY_WAIT" ]; do
    sleep 2
    waited=$((waited + 2))
  done
  echo "waited ${waited} s for the peer's compile ($([ -f "$READY" ] && echo done || echo NOT done))"
fi
machine_state headroom
./build-dev/bench/bench_models --device cuda --dtype "$DTYPES" --steps "$STEPS" \
  --json "$OUT/bench_models.json" > "$OUT/bench_models.log" 2>&1
bench_rc=$?
echo "bench_models exit $bench_rc"
grep -E "FAILED|differs|MISMATCH" "$OUT/bench_models.log" | head -10

if [ "$SERIAL" = 1 ]; then peer_start; fi
machine_state "PyTorch (it compiles first, then times)"
touch "$GO"
if [ -n "$peer" ]; then
  wait "$peer"
  echo "torch peer exit $?"
  peer=""
fi
grep -E "compiled|error|Error" "$OUT/peer_torch.log" | head -10

python3 - "$OUT/bench_models.json" "$OUT/peer_torch.json" <<'PY' | tee "$OUT/compare.md"
import json, sys

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"(cannot read {path}: {e})")
        return None

hr = load(sys.argv[1]) or []
peer = load(sys.argv[2]) or {"rows": {}, "errors": []}
works = [("sd15_unet", "SD1.5 UNet step 512^2 b2"), ("sdxl_unet", "SDXL UNet step 1024^2 b2"),
         ("vae_decode_512", "VAE decode 512^2"), ("vae_decode_1024", "VAE decode 1024^2"),
         ("vae_decode_2048", "VAE decode 2048^2")]
ms = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"
ratio = lambda a, b: f"{a / b:.2f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else "-"
print(f"\ntorch {peer.get('torch', '?')} (CUDA {peer.get('cuda', '?')}), torch.compile "
      f"{peer.get('compile', '?')} (mode reduce-overhead), {peer.get('device', '?')}; "
      "ratio = headroom ms / PyTorch ms, below 1 is faster\n")
print("| work | dtype | headroom ms | torch eager ms | torch.compile ms | headroom/eager | "
      "headroom/compile | replay check |")
print("|---|---|---|---|---|---|---|---|")
for key, label in works:
    dts = sorted({r["dtype"] for r in hr if r.get("key") == key} |
                 set(peer["rows"].get(key, {})), key=lambda d: (d != "f16", d))
    for dt in dts:
        row = next((r for r in hr if r.get("key") == key and r["dtype"] == dt), {})
        p = peer["rows"].get(key, {}).get(dt, {})
        h = row.get("ms") if row.get("ok") else None
        check = "-"
        if row.get("ok"):
            check = "bitwise" if row.get("replay_bitwise") else (
                f"max abs diff {row.get('replay_max_abs_diff', 0):.2g}" +
                ("" if row.get("replay_ok") else " MISMATCH"))
        elif row:
            check = "FAILED: " + row.get("error", "")[:80]
        print(f"| {label} | {dt} | {ms(h)} | {ms(p.get('eager_ms'))} | {ms(p.get('compile_ms'))} "
              f"| {ratio(h, p.get('eager_ms'))} | {ratio(h, p.get('compile_ms'))} | {check} |")
for e in peer.get("errors", []):
    print(f"\npeer error: {e}")
PY
[ "$bench_rc" != 0 ] && exit "$bench_rc"
exit "$tests_rc"
