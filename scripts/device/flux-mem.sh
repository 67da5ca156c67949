# Flux.1 memory on the H200 (issue 39 items 6-7, issue 38's Flux table): the DiT step streamed and in fp8, T5-XXL and VAE rows, the 1024^2 workflow at 24/12/8 GiB.
# Parts (FLUX_MEM_PARTS, default "stream models workflow"), in this order:
#   stream    bench_streaming --only flux-all: the Flux.1-dev DiT step 1024^2 b1 bf16 resident and
#             at 75/50/25/0 % resident against its floor (H2D bandwidth measured in the same run),
#             fp8 e4m3 resident (dequantized and _fast) and streamed, bf16 and fp8 within 8 GiB.
#   models    bench_models: T5-XXL encode of 256 tokens (f16, bf16, and f16 weights in f32 as
#             ComfyUI runs it) and the Flux VAE decode 1024^2 (f16, bf16); $OUT/flux_models.json
#             has the keys t5xxl_encode, t5xxl_encode_f32_cast, flux_vae_decode for the peer's.
#   workflow  headroom make-model --arch flux --size full --no-checkpoint (34 GB of random files in
#             $FLUX_MEM_MODELS; made in the background while `models` runs, kept on a warm
#             machine), then bench/flux_mem.py: examples/flux_dev_workflow.json (UNETLoader +
#             DualCLIPLoader + VAELoader, 1024^2, 20 steps euler/simple cfg 1) with `headroom run
#             --vram-budget` each of FLUX_MEM_BUDGETS GiB and each of FLUX_MEM_FP8 GiB with
#             --fp8_e4m3fn-unet: completed or the error, wall s, s/step, both lenses' peaks, host
#             RSS against the model files, `headroom plan`'s predicted peak against the run's.
# Estimated on the H200 (16 cores): build 3-4 min, stream ~2 min, models ~1 min (make-model
# beside it, ~1 min), workflow ~3 min (the fp8 run quantizes 11.9 G values at load on one thread).
# That is near the 10 minutes of one call: split it when the build is cold, FLUX_MEM_PARTS="stream
# models make" (make: only write the files, beside `models`), then "workflow" on the warm machine
# (build-dev and $FLUX_MEM_MODELS are kept). Timestamps are printed after each part.
# Settings: FLUX_MEM_BUDGETS="24 12 8"  FLUX_MEM_FP8="8" ("" for none)  FLUX_MEM_STEPS=20
#   FLUX_MEM_RUN_TIMEOUT=240 (s, each headroom run)  FLUX_MEM_PX=1024  BENCH_STEPS=5  FLUX_MEM_SIZE=full|tiny  FLUX_MEM_DEVICE=cuda|cpu
#   FLUX_MEM_MODELS=/tmp/flux-models  FLUX_MEM_BUILD_DIR (an existing build: no configure/build)
# The CPU check of this script (tiny Flux, no GPU): OUT=/tmp/fm FLUX_MEM_BUILD_DIR=build
#   FLUX_MEM_SIZE=tiny FLUX_MEM_DEVICE=cpu FLUX_MEM_BUDGETS="1 0.02" FLUX_MEM_FP8=0.02
#   bash scripts/device.sh flux-mem
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date -u +%H:%M:%S)] $*"; }
parts=" ${FLUX_MEM_PARTS:-stream models workflow} "
size=${FLUX_MEM_SIZE:-full}
dev=${FLUX_MEM_DEVICE:-cuda}
steps=${BENCH_STEPS:-5}
models=${FLUX_MEM_MODELS:-/tmp/flux-models-$size}
if [ "$size" = tiny ]; then px=${FLUX_MEM_PX:-64}; wf_steps=${FLUX_MEM_STEPS:-4}
else px=${FLUX_MEM_PX:-1024}; wf_steps=${FLUX_MEM_STEPS:-20}; fi
want() { [[ "$parts" == *" $1 "* ]]; }
dt=bf16 mdt=f16,bf16  # the CPU computes in f32 only
[ "$dev" = cpu ] && dt=f32 mdt=f32

if [ -n "${FLUX_MEM_BUILD_DIR:-}" ]; then
  bd=$FLUX_MEM_BUILD_DIR
else
  device_configure
  device_build build.log headroom bench_streaming bench_models
  bd=build-dev
fi
stamp "build done ($bd)"

if want stream; then
  BENCH_STREAMING_BUDGETS=75,50,25,0 timeout "${STREAM_TIMEOUT:-330}" \
    "./$bd/bench/bench_streaming" --device "$dev" --dtype "$dt" --size "$size" --steps "$steps" \
    --only flux-all > "$OUT/flux_streaming.log" 2>&1
  echo "bench_streaming exit $?"
  grep -E "^\||goal|met$|MISSED$|made in|stored in|bandwidth|failed" "$OUT/flux_streaming.log" | head -60
  stamp "stream done"
fi

models_ready() { [ -f "$models/.complete" ]; }
mm_pid=""
if { want workflow || want make; } && ! models_ready; then
  free_gb=$(df -BG --output=avail "$(dirname "$models")" | tail -1 | tr -dc 0-9)
  echo "make-model --size $size into $models (${free_gb} GB free there; full size needs 34)"
  rm -rf "$models"
  ( timeout "${MAKE_TIMEOUT:-360}" "./$bd/headroom" make-model --arch flux --size "$size" \
      --no-checkpoint --out-dir "$models" > "$OUT/make_model.log" 2>&1 &&
    touch "$models/.complete" ) &
  mm_pid=$!
fi

if want models; then
  for spec in "t5 $mdt" "flux-vae $mdt"; do
    set -- $spec
    timeout "${MODELS_TIMEOUT:-200}" "./$bd/bench/bench_models" --device "$dev" --dtype "$2" \
      --size "$size" --steps 10 --only "$1" --json "$OUT/flux_models_$1.json" \
      > "$OUT/flux_models_$1.log" 2>&1
    echo "bench_models --only $1 exit $?"
    grep -E "^\||FAILED" "$OUT/flux_models_$1.log" | head -12
  done
  python3 - "$OUT" <<'PY'
import json, sys
rows = []
for part in ("t5", "flux-vae"):
    try:
        rows += json.load(open(f"{sys.argv[1]}/flux_models_{part}.json"))
    except Exception as e:  # noqa: BLE001
        print(f"flux_models_{part}.json: {e}")
json.dump(rows, open(f"{sys.argv[1]}/flux_models.json", "w"), indent=1)
PY
  stamp "models done (${mm_pid:+make-model running beside it})"
fi

if [ -n "$mm_pid" ] && ! want workflow; then  # `make` alone: the files for a later call
  wait "$mm_pid"
  tail -6 "$OUT/make_model.log"
  stamp "make-model done"
fi
if want workflow; then
  if [ -n "$mm_pid" ]; then
    wait "$mm_pid"
    tail -6 "$OUT/make_model.log"
  fi
  stamp "make-model done"
  if models_ready; then
    timeout "${WORKFLOW_TIMEOUT:-480}" python3 bench/flux_mem.py --headroom "./$bd/headroom" \
      --models-dir "$models" --workflow examples/flux_dev_workflow.json --out "$OUT" \
      --device "$dev" --budgets "${FLUX_MEM_BUDGETS:-24 12 8}" --fp8 "${FLUX_MEM_FP8-8}" \
      --px "$px" --steps "$wf_steps" --run-timeout "${FLUX_MEM_RUN_TIMEOUT:-240}" \
      > "$OUT/flux_mem.log" 2>&1
    echo "flux_mem.py exit $?"
    cat "$OUT/flux_mem.log"
  else
    echo "no Flux models in $models (make-model failed: $OUT/make_model.log)"
  fi
  stamp "workflow done"
fi
