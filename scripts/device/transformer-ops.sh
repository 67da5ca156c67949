# The transformer ops on the GPU (issue 39): RMS_NORM's, ROPE's and QKV_ROPE's CUDA kernels against
# the CPU (the op harness cases and the Flux/T5-sized production cases; `*rope*` takes QKV_ROPE's).
# Logs to $OUT; carry .debs (scripts/device/env.sh).
device_configure
device_build build.log hr_tests_backend
./build-dev/tests/hr_tests_backend \
  --gtest_filter='Cases/OpCudaTest.*rms_norm*:Cases/OpCudaTest.*rope*:Sd/CudaProduction.*rms_norm*:Sd/CudaProduction.*rope*:CudaBackend.SupportsEveryOpInEveryFloatDtype' \
  > "$OUT/transformer_ops_gpu.log" 2>&1
grep -E "rel L2|FAILED|PASSED|SKIPPED" "$OUT/transformer_ops_gpu.log" | grep -v "^\[ *OK" | head -40
