# fp8 weights on the GPU (issue 38): the CUDA fp8 CAST against the CPU reference, the fp8
# rounding goldens against torch 2.x, and the SDXL step with fp8 weights (bench_streaming
# --only fp8: f16 and fp8 resident, fp8 at 75/50/25/0 % resident against its floor, both
# within a 2 GiB budget).
# Settings: FP8_STEPS (timed steps, default 10). The torch check needs ComfyUI's comfy/float.py
# and comfy/model_patcher.py under .devdata/comfy/comfy/ (carry .devdata; skipped without).
# Logs to $OUT; carry .debs (scripts/device/env.sh).
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
device_build build.log hr_tests_backend bench_streaming
stamp "build done"
./build-dev/tests/hr_tests_backend --gtest_filter='*cast*' > "$OUT/cast_gpu.log" 2>&1
grep -E "FAILED|PASSED|SKIPPED" "$OUT/cast_gpu.log" | head -12
stamp "CAST cases done"
if [ -f .devdata/comfy/comfy/float.py ]; then
  timeout 120 python3 tests/data/fp8/check_with_torch2.py .devdata/comfy \
    tests/data/fp8/fp8_round_golden.bin > "$OUT/fp8_torch2.log" 2>&1
  tail -5 "$OUT/fp8_torch2.log"
  stamp "torch 2 check done"
fi
timeout 480 ./build-dev/bench/bench_streaming --device cuda --steps "${FP8_STEPS:-10}" --only fp8 \
  > "$OUT/bench_fp8.log" 2>&1
grep -E "^\||fp8 / f16" "$OUT/bench_fp8.log" | head -30
stamp "bench done"
