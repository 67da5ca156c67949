# LoRA on the GPU (issue 37): the CUDA LoRA tests, every GPU test, and bench_lora on SDXL.
# Builds with CUDA; runs the CudaLora tests (patch ops on CUDA vs ComfyUI's goldens, streamed
# patched steps captured vs resident), `ctest -L gpu` (HEADROOM_REQUIRE_GPU=1: none may skip),
# writes a full-size random SDXL checkpoint (headroom make-model) and runs bench_lora: LoRA read
# and patch time, SDXL 1024^2 steps resident and at 50/25 % resident with and without a rank-64
# LoRA, and a queue of SDXL jobs alternating two LoRA sets against the same queue without.
# Settings: LORA_STEPS (timed steps, default 10), LORA_JOBS (queue length, default 10),
# LORA_ONLY=patch|queue runs one part of the bench (patch: no checkpoint is written);
# LORA_GPU_TESTS=0 skips the CudaLora tests and ctest -L gpu (builds only headroom and the
# bench). Logs to $OUT; carry .debs (scripts/device/env.sh).
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
if [ "${LORA_GPU_TESTS:-1}" = 1 ]; then
  device_build build.log -k 0 headroom hr_tests_backend hr_tests_graph hr_tests_memory \
    hr_tests_models hr_tests_workflow hr_tests_default_model bench_lora
  stamp "build done"
  ./build-dev/tests/hr_tests_models --gtest_filter='*CudaLora*' > "$OUT/lora_gpu.log" 2>&1
  grep -E "FAILED|Failure|PASSED|SKIPPED" "$OUT/lora_gpu.log" | head -20
  stamp "CudaLora done"

  ctest --test-dir build-dev -L gpu -j1 --output-on-failure --timeout 400 > "$OUT/ctest_gpu.log" 2>&1
  grep -E "tests passed|tests failed|Failed|\*\*\*|Passed +[0-9.]+ sec" "$OUT/ctest_gpu.log" | tail -12
  stamp "ctest -L gpu done"
else
  device_build build.log headroom bench_lora
  stamp "build done"
fi
models=/tmp/bench_lora_models
mkdir -p "$models/checkpoints"
[ "${LORA_ONLY:-}" = patch ] || ./build-dev/headroom make-model --arch sdxl --size full --dtype f16 \
  -o "$models/checkpoints/sdxl.safetensors" > "$OUT/make_model.log" 2>&1 || tail -5 "$OUT/make_model.log"
stamp "SDXL checkpoint written"
timeout 420 ./build-dev/bench/bench_lora --device cuda --steps "${LORA_STEPS:-10}" \
  --jobs "${LORA_JOBS:-10}" --models "$models" ${LORA_ONLY:+--only "$LORA_ONLY"} > "$OUT/bench_lora.log" 2>&1
cat "$OUT/bench_lora.log" | head -60
stamp "bench_lora done"
