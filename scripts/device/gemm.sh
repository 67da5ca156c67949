# Per-shape LINEAR times against PyTorch (issue 21) in one device call (~3 min on a fresh H200,
# most of it the build): builds bench_gemm, which times headroom's LINEAR (cuBLASLt,
# backend/cuda/cuda_gemm.cpp) at every unique GEMM shape of the SD1.5 512^2 and SDXL 1024^2 UNet
# steps (batch 2, f16, after the graph passes), with the addend's cost and fused q/k/v, and writes
# them as JSON; then bench/torch_gemm.py times PyTorch's F.linear on the same shapes and prints
# one markdown table of both with per-model totals. The two run one after the other, each with
# the GPU to itself. Logs to $OUT (configure.log, build.log, bench_gemm.log, gemm.json,
# torch_gemm.log, gemm_compare.md); carry .debs (scripts/device/env.sh).
#   TORCH_FP16_REDUCTION=0|1 (unset: PyTorch's default; see bench/torch_gemm.py)
device_configure
device_build build.log bench_gemm
timeout 300 ./build-dev/bench/bench_gemm --json "$OUT/gemm.json" > "$OUT/bench_gemm.log" 2>&1
rc=$?
echo "== bench_gemm (exit $rc)"
grep -E "LINEAR 8192|total:|addends:|qkv per step" "$OUT/bench_gemm.log"
[ "$rc" = 0 ] && [ -f "$OUT/gemm.json" ] || { tail -20 "$OUT/bench_gemm.log"; exit 1; }
timeout 300 python3 bench/torch_gemm.py "$OUT/gemm.json" 2> "$OUT/torch_gemm.log" |
  tee "$OUT/gemm_compare.md"
