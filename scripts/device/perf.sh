# GPU performance run in one go (issue 9): build with CUDA, check the CUDA ops and model goldens,
# then profile the UNet steps and VAE decodes by op class (bench_profile) with the graph passes
# off (the graph as models build it) and on, and print the benchmark table (bench_models).
# Logs go to $OUT (or ./device-logs). Carry .debs (see scripts/device/env.sh).
#   scripts/device.sh perf[:full|:perf|:quick]   full (default): also every CTest suite on the GPU
#   machine; perf: no CTest; quick: neither CTest nor the as-built profile
archs=${HEADROOM_CUDA_ARCHS:-90}
mode=${1:-full}
# At most seven log files (the device returns a limited number): build, cuda_tests, ctest,
# profile_as_built, profile, bench_models.
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc;
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_CUDA=ON \
    -DHEADROOM_CUDA_ARCHS="$archs" $HR_CMAKE_EXTRA; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ninja -C build-dev -k 0 -j"$(nproc)" >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
{ ./build-dev/tests/hr_tests_backend --gtest_filter='*Cuda*'
  ./build-dev/tests/hr_tests_models --gtest_filter='*Cuda*'
  ./build-dev/tests/hr_tests_graph --gtest_filter='*Cuda*'; } > "$OUT/cuda_tests.log" 2>&1
grep -E "FAILED|^cuda .* rel err|PASSED|CudaCapture" "$OUT/cuda_tests.log" | head -40
if [ "$mode" = full ]; then
  ctest --test-dir build-dev -j8 --output-on-failure --timeout 600 > "$OUT/ctest.log" 2>&1
  tail -12 "$OUT/ctest.log"
fi
if [ "$mode" != quick ]; then
  HEADROOM_GRAPH_PASSES=0 ./build-dev/bench/bench_profile --only sd15,sdxl --steps 10 > "$OUT/profile_as_built.log" 2>&1
fi
./build-dev/bench/bench_profile --only sd15,sdxl,vae512,vae1024 --steps 10 > "$OUT/profile.log" 2>&1
grep -vE "^  " "$OUT/profile.log" | head -120
./build-dev/bench/bench_models --device cuda --dtype f16 --steps 20 2>&1 | tee "$OUT/bench_models.log" | tail -12
