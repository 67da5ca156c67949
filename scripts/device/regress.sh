# A shorter GPU regression check than `gpu` (for a session with little device time left): the
# backend's CUDA op cases and the model GPU tests (goldens, capture, streaming, LoRA, fp8).
# Logs to $OUT; carry .debs (scripts/device/env.sh).
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
device_build build.log hr_tests_backend hr_tests_models
stamp "build done"
ctest --test-dir build-dev -L gpu -R '^(backend_gpu|models_gpu)$' -j1 --output-on-failure \
  --timeout 300 > "$OUT/ctest_regress.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*|Passed +[0-9.]+ sec|FAILED  \]|cuda fp8" \
  "$OUT/ctest_regress.log" | tail -24
stamp "done"
