# The weight block cache on the GPU (issue 15, Note [weight block cache]) in one device call
# (~4 min on a fresh H200): builds with CUDA, runs the allocator and weight tests, the memory
# suite (the 4 GiB budget behaves like a 4 GiB card) and the GPU streaming/golden tests, then
# bench_streaming --only switch (two SDXL UNets of the same shapes under a one-model budget, run in
# turn, with the cache on and off) and the SD1.5 streamed rows with the default plans. Logs to
# $OUT; carry .debs.
device_configure
device_build build.log hr_tests_backend hr_tests_models hr_tests_memory bench_streaming
./build-dev/tests/hr_tests_backend --gtest_filter='Allocator*:DeviceBuffer*' 2>&1 | tail -1
./build-dev/tests/hr_tests_memory 2>&1 | grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]"
./build-dev/tests/hr_tests_models --gtest_filter='Weight*:*CudaGolden*:CudaStreaming*' 2>&1 |
  grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]"
timeout 300 ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps 8 --only switch \
  > "$OUT/switch.log" 2>&1
echo "== switch (exit $?)"
grep -E "^\||model switches" "$OUT/switch.log"
timeout 200 ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps 8 --only sd15 \
  > "$OUT/sd15.log" 2>&1
echo "== sd15 (exit $?)"
grep -E "^\| SD" "$OUT/sd15.log" | cut -d'|' -f3,4,9
