# GPU check in one go (the lead's device runs): build with CUDA, run every test suite (GPU
# tests included), the op harness on CUDA, ComfyUI's end-to-end cases and a workflow on the GPU, the model
# benchmark. Logs go to $OUT (or ./device-logs). Test data is in the repository (tests/data);
# carry .debs (see scripts/device/env.sh).
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; } > "$OUT/machine.log" 2>&1
device_configure
ninja -C build-dev -k 0 -j"$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
ctest --test-dir build-dev -j4 --output-on-failure --timeout 600 > "$OUT/ctest.log" 2>&1
tail -15 "$OUT/ctest.log"
./build-dev/tests/hr_tests_backend --gtest_filter='*Cuda*' > "$OUT/cuda_ops.log" 2>&1
tail -4 "$OUT/cuda_ops.log"
./build-dev/tests/hr_tests_models --gtest_filter='*CudaGolden*' 2>&1 | grep -E "rel err|OK|FAILED|SKIPPED" | tee "$OUT/cuda_golden.log"
./build-dev/tests/hr_tests_workflow --gtest_filter='Cuda/E2E*' > "$OUT/e2e_cuda.log" 2>&1
grep -E "^case|rel err|png|OK \]|FAILED|PASSED" "$OUT/e2e_cuda.log"
mkdir -p /tmp/hr/models/checkpoints
./build-dev/headroom make-model --arch sd1 --size tiny -o /tmp/hr/models/checkpoints/headroom-tiny-sd1.safetensors
./build-dev/headroom run examples/default_workflow.json --device cuda --models-dir /tmp/hr/models \
  --output-dir /tmp/hr/out 2>&1 | tail -3 | tee "$OUT/run_cuda.log"
./build-dev/bench/bench_models --device cuda --dtype f16 --steps 20 2>&1 | tee "$OUT/bench_models.log"
