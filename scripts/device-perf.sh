#!/usr/bin/env bash
# GPU performance run in one go (issue 9): build with CUDA, check the CUDA ops and model goldens,
# then profile the UNet steps and VAE decodes by op class (bench_profile) with the graph passes
# off (the graph as models build it) and on, and print the benchmark table (bench_models).
# Logs go to $OUT (or ./device-logs). Goldens come from $HEADROOM_SHARED_DIR or .devdata/shared.
#   scripts/device-perf.sh [quick]   quick: skip the as-built profile and the test suites
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
export HEADROOM_SHARED_DIR=${HEADROOM_SHARED_DIR:-$PWD/.devdata/shared}
archs=${HEADROOM_CUDA_ARCHS:-90}
mode=${1:-full}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; } > "$OUT/machine.log" 2>&1
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_CUDA=ON \
  -DHEADROOM_CUDA_ARCHS="$archs" > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build-dev -k 0 -j"$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
./build-dev/tests/hr_tests_backend --gtest_filter='*Cuda*' > "$OUT/cuda_ops.log" 2>&1
grep -E "FAILED|rel err" "$OUT/cuda_ops.log" | head -20; tail -3 "$OUT/cuda_ops.log"
./build-dev/tests/hr_tests_models --gtest_filter='*CudaGolden*:*Cuda*' 2>&1 | grep -E "rel err|OK|FAILED|SKIPPED" | tee "$OUT/cuda_golden.log"
./build-dev/tests/hr_tests_graph --gtest_filter='*Cuda*' 2>&1 | tail -3 | tee "$OUT/cuda_graph.log"
if [ "$mode" = full ]; then
  ctest --test-dir build-dev -j8 --output-on-failure --timeout 600 > "$OUT/ctest.log" 2>&1
  tail -12 "$OUT/ctest.log"
  HEADROOM_GRAPH_PASSES=0 ./build-dev/bench/bench_profile --only sd15,sdxl --steps 10 > "$OUT/profile_as_built.log" 2>&1
fi
./build-dev/bench/bench_profile --only sd15,sdxl,vae512,vae1024 --steps 10 > "$OUT/profile.log" 2>&1
grep -E "^step|^\| |^##" "$OUT/profile.log" | head -80
./build-dev/bench/bench_models --device cuda --dtype f16 --steps 20 2>&1 | tee "$OUT/bench_models.log" | tail -12
