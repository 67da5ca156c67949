# The GPU test set in one device call (issue 36's closing check): build with CUDA, run every GPU
# CTest entry (`ctest -L gpu`, HEADROOM_REQUIRE_GPU=1 so none may skip), the plan against the
# run on the GPU (PlanCuda*: full-size SD1.5 512^2 and SDXL 1024^2 random f16 checkpoints under
# no budget and budgets that stream and tile) and `headroom probe --json` (the device profile).
# Logs to $OUT; carry .debs (scripts/device/env.sh).
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
device_build build.log -k 0 headroom hr_tests_backend hr_tests_graph hr_tests_memory hr_tests_models \
  hr_tests_workflow hr_tests_default_model bench_models bench_streaming
stamp "build done"
ctest --test-dir build-dev -L gpu -j2 --output-on-failure --timeout 400 > "$OUT/ctest_gpu.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*|Passed +[0-9.]+ sec" "$OUT/ctest_gpu.log" | tail -12
stamp "ctest -L gpu done"
timeout 240 ./build-dev/tests/hr_tests_workflow --gtest_filter='PlanCuda*' > "$OUT/plan_cuda.log" 2>&1
grep -E "budget|OK \]|FAILED|Failure|SKIPPED|PASSED" "$OUT/plan_cuda.log" | head -40
stamp "plan done"
timeout 60 ./build-dev/headroom probe --json > "$OUT/probe.json" 2> "$OUT/probe.err"
head -c 1500 "$OUT/probe.json"; tail -3 "$OUT/probe.err"
stamp "probe done"
