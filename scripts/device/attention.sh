# headroom's attention kernels against PyTorch's SDPA backends (FlashAttention-2, cuDNN, memory-
# efficient) at the SD1.5 / SDXL UNet shapes, one after the other in one device call (~2 min):
# bench/bench_attention (headroom, with the cuBLAS 8192^3 ceiling) and bench/torch_attention.py.
# Logs to $OUT (bench_attention.log, torch_attention.md); carry .debs.
device_configure
device_build build_attention.log bench_attention
timeout 200 ./build-dev/bench/bench_attention > "$OUT/bench_attention.log" 2>&1
echo "== bench_attention (exit $?)"
grep -E "TFLOP/s \(the ceiling|^f16|^shape|^sd|per UNet step" "$OUT/bench_attention.log" | head -20
timeout 200 python3 bench/torch_attention.py | tee "$OUT/torch_attention.md"
