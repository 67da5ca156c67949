# GPU runs of the memory manager (issue 15) in one go (~8 min on a fresh H200): build with CUDA;
# the streaming benchmark (every row against its floor); the GPU tests of the budget, of weight
# streaming and the model goldens, and the CUDA op harness with the production-path checks
# (OPS=0 skips those); then a full-size SDXL 1024x1024 workflow (random weights, STEPS steps)
# without a budget and within 4 and 2 GiB, each with its host RSS against the checkpoint's size.
# Logs go to $OUT (or ./device-logs); carry .debs (scripts/device/env.sh).
OPS=${OPS:-1}
STEPS=${STEPS:-8}
mkdir -p /tmp/hr/models/checkpoints /tmp/hr/out
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
ninja -C build-dev -j"$(nproc)" headroom hr_tests_memory hr_tests_models bench_streaming \
  $([ "$OPS" = 1 ] && echo hr_tests_backend) > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
stamp "build ok"
B=./build-dev/headroom
CKPT=/tmp/hr/models/checkpoints/sdxl-full.safetensors
$B make-model --arch sdxl --size full --seed 0 -o "$CKPT" > /dev/null 2>&1 &
maker=$!
[ "${SKIP_BENCH:-0}" = 1 ] || timeout 240 ./build-dev/bench/bench_streaming --device cuda --dtype f16 \
  --steps "${BENCH_STEPS:-10}" > "$OUT/bench_streaming.log" 2>&1
grep -E "^\||^device|floor =|timed step|tenths" "$OUT/bench_streaming.log"
stamp "bench done"
timeout 60 ./build-dev/tests/hr_tests_memory --gtest_filter='*Cuda*' > "$OUT/budget_cuda.log" 2>&1
grep -E "budget|^\[  (PASSED|FAILED|  OK|SKIPPED) |Failure" "$OUT/budget_cuda.log" | head -12
timeout 120 ./build-dev/tests/hr_tests_models --gtest_filter='CudaStreaming*:*CudaGolden*' > "$OUT/streaming_cuda.log" 2>&1
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |steps|rel err|Failure" "$OUT/streaming_cuda.log" | head -20
stamp "tests done"
wait $maker
stamp "checkpoint $(stat -c %s "$CKPT") bytes"
python3 - <<PY
import json
j = json.load(open('examples/default_workflow.json'))
j['5']['inputs'].update(width=1024, height=1024); j['3']['inputs']['steps'] = $STEPS
j['4']['inputs']['ckpt_name'] = 'sdxl-full.safetensors'
json.dump(j, open('/tmp/hr/sdxl.json', 'w'))
PY
for budget in none 4GiB 2GiB; do
  echo "== SDXL full 1024x1024, $STEPS steps, budget $budget" | tee -a "$OUT/budget_runs.log"
  flag=""; [ "$budget" = none ] || flag="--vram-budget $budget"
  timeout 120 /usr/bin/time -f "wall %e s, max RSS %M KiB" $B run /tmp/hr/sdxl.json --device cuda \
    --models-dir /tmp/hr/models --output-dir /tmp/hr/out $flag 2>&1 | tr '\r' '\n' |
    grep -E "executed|level|png|wall|rror|stream|tiled" | tail -8 | tee -a "$OUT/budget_runs.log"
done
left=$(( ${DEADLINE:-540} - ($(date +%s) - t0) ))  # the op harness gets what the call has left
if [ "$OPS" = 1 ] && [ "$left" -gt 30 ]; then
  timeout "$left" ./build-dev/tests/hr_tests_backend --gtest_filter='*Cuda*' > "$OUT/cuda_ops.log" 2>&1
  echo "op harness exit $?"
  grep -E "seed|^\[  (PASSED|FAILED) |FAILED  \]|Failure" "$OUT/cuda_ops.log" | head -20
fi
stamp "all done"
