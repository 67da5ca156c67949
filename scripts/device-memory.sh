#!/usr/bin/env bash
# GPU runs of the memory manager (issue 15) in one go: build with CUDA, the GPU tests of the
# budget and of weight streaming, the streaming benchmark, and full-size workflows under budgets
# (SD1.5 512x512 and SDXL 1024x1024, random weights). Logs go to $OUT (or ./device-logs);
# carry .debs (scripts/device-env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-logs}
mkdir -p "$OUT" /tmp/hr/models/checkpoints /tmp/hr/out
source scripts/device-env.sh
device_configure
ninja -C build-dev -j"$(nproc)" headroom hr_tests_memory hr_tests_models hr_tests_graph bench_streaming \
  > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
./build-dev/tests/hr_tests_memory --gtest_filter='*Cuda*' 2>&1 | grep -E "budget|OK|FAILED|SKIPPED|Failure" | tee "$OUT/budget_cuda.log"
./build-dev/tests/hr_tests_models --gtest_filter='CudaStreaming*:*CudaGolden*' > "$OUT/streaming_cuda.log" 2>&1
grep -E -A3 "steps|took|rel err|OK|FAILED|SKIPPED|Failure" "$OUT/streaming_cuda.log" | grep -v "^\[ RUN"
./build-dev/tests/hr_tests_graph 2>&1 | tail -2 | tee "$OUT/graph.log"
[ "${SKIP_BENCH:-0}" = 1 ] || ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps ${BENCH_STEPS:-10} 2>&1 | tee "$OUT/bench_streaming.log"
[ "${SKIP_BUDGET:-0}" = 1 ] && exit 0
B=./build-dev/headroom
python3 -c "
import json
j=json.load(open('examples/default_workflow.json'))
j['5']['inputs'].update(width=1024,height=1024); j['3']['inputs']['steps']=8
j['4']['inputs']['ckpt_name']='sdxl-full.safetensors'
json.dump(j,open('/tmp/hr/sdxl.json','w'))"
$B make-model --arch sdxl --size full --seed 0 -o /tmp/hr/models/checkpoints/sdxl-full.safetensors > /dev/null 2>&1 || echo "make-model sdxl failed"
for budget in none 4GiB 2GiB; do
  echo "== SDXL full 1024x1024, 8 steps, budget $budget" | tee -a "$OUT/budget_runs.log"
  flag=""; [ "$budget" = none ] || flag="--vram-budget $budget"
  /usr/bin/time -f "wall %e s, max RSS %M KiB" $B run /tmp/hr/sdxl.json --device cuda --models-dir /tmp/hr/models \
    --output-dir /tmp/hr/out $flag 2>&1 | tr '\r' '\n' | grep -E "headroom|node|png|wall" | tail -9 | tee -a "$OUT/budget_runs.log"
  $B plan /tmp/hr/sdxl.json --device cuda --models-dir /tmp/hr/models $flag 2>&1 | tail -1 | tee -a "$OUT/budget_runs.log"
done
