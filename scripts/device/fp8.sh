# fp8 weights on the GPU (issue 38): the CUDA fp8 CAST against the CPU reference, the fp8
# rounding goldens against torch 2.x, and the SDXL step with fp8 weights (bench_streaming
# --only fp8: f16 and fp8 resident, fp8 at 75/50/25/0 % resident against its floor, both
# within a 2 GiB budget).
# Then a per-node profile (bench_profile --only sdxl_fp8_fast: the f16, fp8 dequantize and fp8
# _fast SDXL steps in one run; per class with "fp8 dequantize", "fp8 activation cast" and "fp8
# GEMM" apart, by role, slowest nodes; Note [dequantize cost] in graph/pass_stack.cpp).
# Settings: FP8_STEPS (timed steps, default 10), FP8_BENCH=0 (no bench), FP8_GOLDEN=0 (no ComfyUI
# golden remade), FP8_PROFILE=0 (no profile), FP8_PROFILE_ONLY=1 (the CAST cases and the profile
# only: ~3 minutes after the build). The torch checks need the ComfyUI files they
# import, as .devdata/comfyui.tar.xz (comfyui/comfy/...; carry .devdata; skipped without): the
# working tree's 64 MiB leave no room for them unpacked.
# Logs to $OUT; carry .debs (scripts/device/env.sh).
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
device_build build.log hr_tests_backend hr_tests_models bench_streaming bench_profile
stamp "build done"
./build-dev/tests/hr_tests_backend --gtest_filter='Cases/OpCudaTest.*cast*:Cases/OpCudaTest.*dequant*:Cases/OpCudaTest.*linear_fp8*:CudaBackend.SupportsEvery*' \
  > "$OUT/cast_gpu.log" 2>&1
grep -E "FAILED|PASSED|SKIPPED" "$OUT/cast_gpu.log" | head -12
stamp "CAST, dequant and LINEAR_FP8 cases done"
fp8_profile() {
  timeout 240 ./build-dev/bench/bench_profile --device cuda --steps 6 --top 12 --only sdxl_fp8_fast \
    > "$OUT/profile_fp8.log" 2>&1
  grep -E "^## |^step |^\| (class|GEMM|fp8|convolution|attention|elementwise|normal|copies)|^by op" \
    "$OUT/profile_fp8.log" | head -60
  stamp "fp8 profile done (full: profile_fp8.log)"
}
if [ "${FP8_PROFILE_ONLY:-0}" = 1 ]; then fp8_profile; exit 0; fi
comfy=""
if [ -f .devdata/comfyui.tar.xz ]; then
  mkdir -p /tmp/comfy-src && tar -C /tmp/comfy-src -xJf .devdata/comfyui.tar.xz && comfy=/tmp/comfy-src/comfyui
fi
if [ -n "$comfy" ] && [ "${FP8_GOLDEN:-1}" = 1 ]; then  # ComfyUI's fp8 UNet (dequant, _fast)
  timeout 240 python3 tests/data/fp8/make_comfy_fp8_unet_golden.py "$comfy" tests/data/golden \
    tests/data/fp8/comfy_fp8_unet.safetensors > "$OUT/fp8_unet_golden.log" 2>&1
  tail -8 "$OUT/fp8_unet_golden.log"
  cp tests/data/fp8/comfy_fp8_unet.safetensors "$OUT/" 2>/dev/null
  stamp "ComfyUI fp8 UNet golden done"
fi
./build-dev/tests/hr_tests_models --gtest_filter='Modes/CudaFp8Golden.*' > "$OUT/fp8_golden_gpu.log" 2>&1
grep -E "cuda fp8|FAILED|PASSED|SKIPPED|Failure|rel err" "$OUT/fp8_golden_gpu.log" | head -16
stamp "fp8 UNet goldens done"
if [ -n "$comfy" ]; then
  timeout 120 python3 tests/data/fp8/check_with_torch2.py "$comfy" \
    tests/data/fp8/fp8_round_golden.bin > "$OUT/fp8_torch2.log" 2>&1
  tail -5 "$OUT/fp8_torch2.log"
  stamp "torch 2 check done"
fi
if [ -n "$comfy" ]; then  # ComfyUI's LoRA-on-fp8 goldens remade with real float8
  timeout 180 python3 tests/data/lora/fp8/make_fp8_lora_golden.py "$comfy" --check \
    > "$OUT/fp8_lora_torch2.log" 2>&1
  tail -5 "$OUT/fp8_lora_torch2.log"
  stamp "LoRA-on-fp8 torch 2 check done"
fi
[ "${FP8_BENCH:-1}" = 1 ] || exit 0
timeout 400 ./build-dev/bench/bench_streaming --device cuda --steps "${FP8_STEPS:-10}" --only fp8 \
  > "$OUT/bench_fp8.log" 2>&1
grep -E "^\||fp8 / f16" "$OUT/bench_fp8.log" | head -30
stamp "bench done"
if [ "${FP8_PROFILE:-1}" = 1 ]; then fp8_profile; fi  # the task exits 0 without it
