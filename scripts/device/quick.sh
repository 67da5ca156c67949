# A short GPU check for one device call (~6 min on a fresh H200): build headroom and the backend
# and model tests with CUDA, run the CUDA op harness (every op against the CPU reference), the
# model GPU tests (goldens, streaming with captures, MODEL_FILTER for more), the bundled
# model on CUDA against the CPU, then `headroom bench`
# on a full-size random-weight SDXL 1024x1024 workflow under a budget that forces streaming
# (all three modes, RUNS images each, STEPS steps). Logs to $OUT; carry .debs (scripts/device/env.sh).
RUNS=${RUNS:-2}
STEPS=${STEPS:-4}
BUDGET=${BUDGET:-4GiB}
MODEL_FILTER=${MODEL_FILTER:-}
OPS=${OPS:-1}  # 0: skip the op harness (saves its build on a short device budget)
mkdir -p /tmp/hr/models/checkpoints /tmp/hr/out
device_configure
ninja -C build-dev -j"$(nproc)" headroom $([ "$OPS" = 1 ] && echo hr_tests_backend) hr_tests_models hr_tests_default_model > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
B=./build-dev/headroom
$B make-model --arch sdxl --size full --seed 0 -o /tmp/hr/models/checkpoints/sdxl-full.safetensors \
  > /dev/null 2>&1 &
maker=$!
if [ "$OPS" = 1 ]; then
  ./build-dev/tests/hr_tests_backend --gtest_filter='*Cuda*' > "$OUT/cuda_ops.log" 2>&1
  tail -3 "$OUT/cuda_ops.log"
fi
./build-dev/tests/hr_tests_models --gtest_filter="*CudaGolden*:CudaStreaming*${MODEL_FILTER:+:$MODEL_FILTER}" \
  > "$OUT/models_gpu.log" 2>&1
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |steps|Failure" "$OUT/models_gpu.log" | head -30
./build-dev/tests/hr_tests_default_model --gtest_filter='*CudaMatchesCpu*:*SameSeed*' \
  > "$OUT/default_model_gpu.log" 2>&1
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |max|Failure" "$OUT/default_model_gpu.log" | head -12
echo "== the README's main job on the GPU (bundled model, 256x256, 20 steps; twice: the second is warm)"
for i in 1 2; do
  /usr/bin/time -f "wall %e s" $B run examples/default_workflow.json --device cuda --models-dir models \
    --output-dir /tmp/hr/out-default 2>&1 | tr '\r' '\n' | grep -E "executed|wall|rror"
done
wait $maker
python3 - <<'PY'
import json, os
j = json.load(open('examples/default_workflow.json'))
j['5']['inputs'].update(width=1024, height=1024)
j['3']['inputs']['steps'] = int(os.environ.get('STEPS', '4'))
j['4']['inputs']['ckpt_name'] = 'sdxl-full.safetensors'
json.dump(j, open('/tmp/hr/sdxl.json', 'w'))
PY
echo "== bench SDXL 1024, $STEPS steps, $RUNS runs per mode, budget $BUDGET"
$B bench /tmp/hr/sdxl.json --runs "$RUNS" --modes resident,stream,auto --vram-budget "$BUDGET" \
  --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out --plot "$OUT/bench_sdxl.svg" \
  2> "$OUT/bench_sdxl_progress.log" | tee "$OUT/bench_sdxl.txt"
echo "bench exit ${PIPESTATUS[0]}"
grep -E "fatal|failed" "$OUT/bench_sdxl_progress.log" | head -5
exit 0
