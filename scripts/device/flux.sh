# Flux.1 on the H200 (issue 39): builds bench_models and the GPU tests, runs the model GPU tests
# (the Flux DiT golden on CUDA among them), then times the Flux.1-dev DiT step at 1024^2 bf16 in
# headroom (bench_models --only flux) and in PyTorch (bench/torch_peer_flux.py: diffusers eager
# and torch.compile), one after the other so each has the GPU to itself, and prints the ratios.
# Before the call: `scripts/device.sh compare:prepare` (diffusers' source into bench/peers);
# carry bench/peers and .debs.   FLUX_STEPS=10  ITERS=10  COMPILE=1|0  FLUX_TESTS=1|0
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
device_configure
device_build build.log bench_models hr_tests_models
stamp "build done"
if [ "${FLUX_TESTS:-1}" = 1 ]; then
  ctest --test-dir build-dev -L gpu -R '^models_gpu$' --output-on-failure --timeout 300 \
    > "$OUT/ctest_models_gpu.log" 2>&1
  grep -E "tests passed|tests failed|FAILED  \]" "$OUT/ctest_models_gpu.log" | tail -8
  stamp "models_gpu done"
fi
./build-dev/bench/bench_models --device cuda --dtype bf16 --only flux --steps "${FLUX_STEPS:-10}" \
  --json "$OUT/flux_headroom.json" > "$OUT/flux_headroom.log" 2>&1
tail -6 "$OUT/flux_headroom.log"
stamp "headroom flux done"
PYTHONPATH=bench/peers/diffusers/src:bench timeout "${PEER_TIMEOUT:-360}" python3 bench/torch_peer_flux.py \
  > "$OUT/flux_peer.log" 2>&1
tail -5 "$OUT/flux_peer.log"
stamp "peer done"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
try:
    hr = {r["key"]: r for r in json.load(open(f"{out}/flux_headroom.json"))}["flux_dit"]["ms"]
    pe = json.load(open(f"{out}/peer_flux.json"))["rows"]["flux_dit"]["bf16"]
except Exception as e:  # noqa: BLE001
    print("no table:", e); sys.exit(0)
print("| Flux.1-dev DiT step 1024^2 b1 bf16 | ms | headroom / it |")
print("|---|---|---|")
print(f"| headroom | {hr:.2f} | |")
for k, name in (("eager_ms", "diffusers eager"), ("compile_ms", "diffusers torch.compile")):
    if k in pe:
        print(f"| {name} | {pe[k]:.2f} | {hr / pe[k]:.3f}x |")
PY
