# Z-Image on the H200 (issue 40 item 5): DiT vs torch.compile and streamed, Qwen3-4B vs transformers, workflow budgets.
# Parts (ZIMAGE_PARTS, default "peer stream models"; add "make" to write the workflow's files
# while the peer compiles, then "workflow" in a later call on the warm machine), run in this
# order, with a timestamp after each:
#   peer      bench/torch_peer_zimage.py: diffusers' ZImageTransformer2DModel (Z-Image Turbo's
#             config, random bf16, 1024^2 b1 with the template's caption) and transformers'
#             Qwen3Model (Qwen3-4B, 35 layers: hidden_states[-2], 128 tokens, bf16), eager and
#             torch.compile(mode="reduce-overhead"). Its phase 1 (build, compile, warm-up) starts
#             first, at a lower CPU priority, beside headroom's build; headroom's timed parts wait
#             for it (at most PEER_READY_WAIT s) and it times (phase 2) after them, so neither
#             times while the other uses the GPU. Then the table of both with the ratios.
#   stream    bench_streaming --only zimage: the DiT step 1024^2 b1 bf16 resident and at
#             75/50/25/0 % resident against its floor max(resident, streamed bytes / H2D
#             bandwidth), both measured in the same run (goal <= 1.15x).
#   models    bench_models --only zimage-all --dtype bf16 into $OUT/zimage_models.json: the DiT
#             step (key zimage_dit; goal <= 0.85x diffusers under torch.compile), the Qwen3-4B
#             encode of 128 tokens (qwen3_4b_encode) and the same with bf16 weights in an f32
#             computation, as ComfyUI and headroom's text encoder run it (qwen3_4b_encode_f32_cast).
#   make      headroom make-model --arch zimage --size full: 20 GB of random files in
#             $ZIMAGE_MODELS (kept on a warm machine), written in the background after the build,
#             while the peer compiles; the timed parts wait for it.
#   workflow  (make first if the files are not there) bench/flux_mem.py --name zimage_mem:
#             examples/zimage_turbo_workflow.json (1024^2, 8 steps res_multistep/simple cfg 1)
#             with `headroom run --vram-budget` each of ZIMAGE_MEM_BUDGETS GiB and each of
#             ZIMAGE_MEM_FP8 GiB with --fp8_e4m3fn-unet (UNETLoader's fp8_e4m3fn): completed, wall
#             s, s/step, both lenses' peaks, host RSS, `headroom plan`'s peak against the run's
#             (goal within 2 %). One watchdog per run (ZIMAGE_MEM_RUN_TIMEOUT).
# Estimated seconds on the H200 (16 cores), cold machine, per part:
#   build     ~90: configure, bench_streaming and bench_models (+ headroom, ~20 more, with make or
#             workflow)
#   peer      phase 1 ~150-200 beside the build (imports and models ~20; the 6 B DiT's compile 1-2
#             minutes, as Flux's 115 s; Qwen3's ~40, QWEN_COMPILE=0 drops it), so the timed parts
#             start at ~200 s; phase 2 (timing) ~15 after them
#   make      ~40 beside the peer's compile (no extra wall time while the compile is longer)
#   stream    ~40 (6.15 G random weights made ~10, resident + 4 rows of 9 steps)
#   models    ~40 (the DiT's and Qwen3's weights made again, 15 runs each)
#   workflow  ~150-200 (4 runs of ~30-45: load 20 GB, plan, 8 steps, decode; the fp8 one quantizes
#             6.15 G values at load)
# Default (peer stream models): ~5 minutes; COMPILE=0: ~3. Then workflow on the warm machine:
# ~3-4 minutes (plus make ~40 when it did not run before).
# Files under $OUT (6 at most): zimage_bench.log (stream and models), zimage_models.json,
# zimage_peer.log, peer_zimage.json; workflow: zimage_mem.log (make-model, the table, every run's
# log), zimage_mem.json. configure.log and build.log stay only when they fail.
# Before the call: `scripts/device.sh compare:prepare` (diffusers' source into bench/peers);
# carry bench/peers and .debs.
# Settings: ZIMAGE_PARTS="peer stream models"  BENCH_STEPS=5 (stream)  MODELS_STEPS=10
#   ITERS=10 (peer)  COMPILE=1|0 (peer)  QWEN_COMPILE (default COMPILE; 0 saves ~40 s)
#   ZIMAGE_PEER_PARTS=dit,qwen3  PEER_READY_WAIT=240 (0: headroom times while the peer compiles,
#   ~100 s shorter; the peer's few warm-up calls may then overlap a timed row)
#   PEER_TIMEOUT=540 (both phases)
#   STREAM_TIMEOUT=240  MODELS_TIMEOUT=240  ZIMAGE_MEM_BUDGETS="16 8 6"  ZIMAGE_MEM_FP8="6" (""
#   for none)  ZIMAGE_MEM_RUN_TIMEOUT=150  MAKE_TIMEOUT=300  WORKFLOW_TIMEOUT=600
#   ZIMAGE_MODELS=/tmp/zimage-models-SIZE  ZIMAGE_SIZE=full|tiny  ZIMAGE_DEVICE=cuda|cpu
#   ZIMAGE_BUILD_DIR (an existing build: no configure/build)
# The CPU check of this script (tiny Z-Image, no GPU; the peer needs SHARED_PEERS=/work/shared/peers
# scripts/device.sh compare:prepare first, and a python3 with torch and diffusers' dependencies:
# where those are missing its rows are errors, and bench/torch_peer_zimage_cpu.py checks the
# peer's DiT half on its own):
#   OUT=/tmp/zi ZIMAGE_BUILD_DIR=build ZIMAGE_SIZE=tiny ZIMAGE_DEVICE=cpu
#   ZIMAGE_PARTS="peer stream models make workflow" ZIMAGE_MEM_BUDGETS="1 0.02"
#   ZIMAGE_MEM_FP8=0.02 bash scripts/device.sh zimage
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date -u +%H:%M:%S)] $*"; }
parts=" ${ZIMAGE_PARTS:-peer stream models} "
want() { [[ "$parts" == *" $1 "* ]]; }
size=${ZIMAGE_SIZE:-full}
dev=${ZIMAGE_DEVICE:-cuda}
models=${ZIMAGE_MODELS:-/tmp/zimage-models-$size}
dt=bf16
[ "$dev" = cpu ] && dt=f32  # the CPU computes in f32 only
if [ "$size" = tiny ]; then px=64; else px=1024; fi
bench_log="$OUT/zimage_bench.log"
{ want stream || want models; } && : > "$bench_log"
[ "$dev" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2

# The peer's phase 1 first, beside the build (Note in the header: `peer`).
GO="/tmp/hr_zimage_go.$$"  # not under $OUT: few files come back from there
READY="/tmp/hr_zimage_ready.$$"
peer=""
peer_stop() {  # on any exit (a failed build, a timeout) while the peer still runs
  [ -n "$peer" ] && { disown "$peer"; kill "$peer"; } 2> /dev/null
  rm -f "$GO" "$READY"
}
trap peer_stop EXIT
rm -f "$GO" "$READY" "$OUT/peer_zimage.json" "$OUT/zimage_models.json"
if want peer; then
  if [ -d bench/peers/diffusers/src/diffusers ]; then
    OUT="$OUT" GO_FILE="$GO" READY_FILE="$READY" DEVICE="$dev" SIZE="$size" \
      PARTS="${ZIMAGE_PEER_PARTS:-dit,qwen3}" \
      CAP_TOKENS="${CAP_TOKENS:-23}" PYTHONPATH="$PWD/bench/peers/diffusers/src:$PWD/bench" \
      PYTHONUNBUFFERED=1 nice -n 10 timeout "${PEER_TIMEOUT:-540}" python3 bench/torch_peer_zimage.py \
      > "$OUT/zimage_peer.log" 2>&1 &
    peer=$!
  else
    echo "no bench/peers/diffusers: run 'scripts/device.sh compare:prepare' before the call and" \
      "carry bench/peers; no PyTorch rows" | tee "$OUT/zimage_peer.log"
  fi
fi

if [ -n "${ZIMAGE_BUILD_DIR:-}" ]; then
  bd=$ZIMAGE_BUILD_DIR
else
  targets=""
  want stream && targets+=" bench_streaming"
  want models && targets+=" bench_models"
  { want make || want workflow; } && targets+=" headroom"
  device_configure
  [ -n "$targets" ] && device_build build.log $targets
  rm -f "$OUT/configure.log" "$OUT/build.log"  # kept only when they fail (device_build exits)
  bd=build-dev
fi
stamp "build done ($bd)"

# make-model (parts make and workflow) in the background while the peer compiles; the timed parts
# wait for its end (its CPU and disk work would disturb them).
mem_log="$OUT/zimage_mem.log"
{ want make || want workflow; } && : > "$mem_log"
mm_pid=""
if { want make || want workflow; } && [ ! -f "$models/.complete" ]; then
  free_gb=$(df -BG --output=avail "$(dirname "$models")" | tail -1 | tr -dc 0-9)
  echo "make-model --arch zimage --size $size into $models (${free_gb} GB free there; full size needs 21)" | tee -a "$mem_log"
  rm -rf "$models"
  ( timeout "${MAKE_TIMEOUT:-300}" "./$bd/headroom" make-model --arch zimage --size "$size" \
      --out-dir "$models" >> "$mem_log" 2>&1 && touch "$models/.complete" ) &
  mm_pid=$!
fi
make_wait() {
  [ -z "$mm_pid" ] && return
  wait "$mm_pid"
  mm_pid=""
  tail -4 "$mem_log"
  stamp "make-model done"
}

# headroom's timed parts wait for the peer's compile and warm-up (its GPU work).
if { want stream || want models; }; then make_wait; fi
if [ -n "$peer" ] && { want stream || want models; }; then
  waited=0
  while [ ! -f "$READY" ] && kill -0 "$peer" 2> /dev/null && [ "$waited" -lt "${PEER_READY_WAIT:-240}" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  [ -f "$READY" ] || echo "the peer is not ready after ${waited} s: headroom times beside it"
  grep -E "built in|compiled and|error|Error" "$OUT/zimage_peer.log" | cut -c1-250 | tail -6
  stamp "peer phase 1 done (headroom waited ${waited} s)"
fi

if want stream; then
  echo "=== bench_streaming --only zimage" >> "$bench_log"
  BENCH_STREAMING_BUDGETS=${BENCH_STREAMING_BUDGETS:-75,50,25,0} timeout "${STREAM_TIMEOUT:-240}" \
    "./$bd/bench/bench_streaming" --device "$dev" --dtype "$dt" --size "$size" \
    --steps "${BENCH_STEPS:-5}" --only zimage >> "$bench_log" 2>&1
  echo "bench_streaming exit $?"
  sed -n '/=== bench_streaming/,$p' "$bench_log" |
    grep -E "^\| Z-Image|goal|met$|MISSED$|made in|bandwidth|failed" | cut -c1-300 | head -24
  stamp "stream done"
fi

if want models; then
  echo "=== bench_models --only zimage-all" >> "$bench_log"
  timeout "${MODELS_TIMEOUT:-240}" "./$bd/bench/bench_models" --device "$dev" --dtype "$dt" \
    --size "$size" --steps "${MODELS_STEPS:-10}" --only zimage-all \
    --json "$OUT/zimage_models.json" >> "$bench_log" 2>&1
  echo "bench_models exit $?"
  sed -n '/=== bench_models/,$p' "$bench_log" | grep -E "^\| (Z-Image|Qwen3)|FAILED" | cut -c1-300
  stamp "models done"
fi

if [ -n "$peer" ]; then
  touch "$GO"
  wait "$peer"
  echo "peer exit $? (124: killed at PEER_TIMEOUT; 1: a row failed, its error below)"
  peer=""
  grep -E "^\[peer" "$OUT/zimage_peer.log" | cut -c1-250 | tail -10
  stamp "peer done"
fi
if want peer || want models; then
  python3 bench/torch_peer_zimage.py table "$OUT/zimage_models.json" "$OUT/peer_zimage.json"
fi

make_wait  # `make` alone, or before `workflow`
if want workflow; then
  if [ -f "$models/.complete" ]; then
    scratch=/tmp/zimage-mem.$$
    rm -rf "$scratch"
    timeout "${WORKFLOW_TIMEOUT:-600}" python3 bench/flux_mem.py --headroom "./$bd/headroom" \
      --models-dir "$models" --workflow examples/zimage_turbo_workflow.json --out "$OUT" \
      --device "$dev" --budgets "${ZIMAGE_MEM_BUDGETS:-16 8 6}" --fp8 "${ZIMAGE_MEM_FP8-6}" \
      --px "$px" --steps 8 --run-timeout "${ZIMAGE_MEM_RUN_TIMEOUT:-150}" --name zimage_mem \
      --scratch "$scratch" --title "Z-Image Turbo workflow (examples/zimage_turbo_workflow.json)" \
      2>&1 | tee -a "$mem_log"
    echo "flux_mem.py exit ${PIPESTATUS[0]}"
    for f in "$scratch"/zimage_mem_run_*.log; do
      [ -f "$f" ] && { echo "=== $(basename "$f")"; cat "$f"; } >> "$mem_log"
    done
  else
    echo "no Z-Image models in $models (make-model failed: $mem_log)"
  fi
  stamp "workflow done"
fi
