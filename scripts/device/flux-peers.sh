# Flux.1's PyTorch-side peers on the H200 (issue 39 item 7), one table. First ComfyUI a125cd84's
# own low-VRAM path on the Flux.1-dev DiT step with 0/25/50/75/100 % of its bytes resident
# (bench/comfy_lowvram_flux.py), then, by bench/torch_peer_flux.py, diffusers' DiT step (eager;
# COMPILE=1 adds torch.compile, minutes), transformers' T5-XXL encode of 256 tokens (f16 and bf16
# eager, f16 compiled) and diffusers' Flux VAE decode at 1024^2 (bf16), one after the other so
# each has the GPU to itself. Builds nothing. Host RAM: the ComfyUI run holds the 23.8 GB bf16 DiT in
# host memory (pageable, as ComfyUI's loader leaves it); the diffusers models are built on the GPU.
# Before the call: `scripts/device.sh compare:prepare` (diffusers into bench/peers) and
# `COMFYUI_GIT=... scripts/device.sh flux-e2e:prepare` (.devdata/comfyui.tar.xz); carry
# bench/peers and .devdata. About 6-8 minutes with the defaults.
#   PARTS=dit,vae,t5  COMPILE=0|1 (the DiT)  T5_COMPILE=1|0  T5_DTYPES=bf16,f16
#   T5_COMPILE_DTYPES=f16  ITERS=10
#   RESIDENT=0,25,50,75,100  LOWVRAM_ITERS=5  COMFY_ARGS="" (e.g. --async-offload)
#   LOWVRAM_TIMEOUT=240  PEER_TIMEOUT=330 (seconds)  LOWVRAM=1|0  PEER=1|0
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
free -g | sed -n 2p
rc=0
if [ "${LOWVRAM:-1}" = 1 ]; then
  if [ -f .devdata/comfyui.tar.xz ]; then
    rm -rf /tmp/comfy-src && mkdir -p /tmp/comfy-src && tar -C /tmp/comfy-src -xJf .devdata/comfyui.tar.xz
    RESIDENT=${RESIDENT:-0,25,50,75,100} ITERS=${LOWVRAM_ITERS:-5} \
      timeout "${LOWVRAM_TIMEOUT:-240}" python3 bench/comfy_lowvram_flux.py --comfy /tmp/comfy-src/comfyui \
      > "$OUT/comfy_lowvram.log" 2>&1 || rc=1
    grep -E "^\[comfy-lowvram" "$OUT/comfy_lowvram.log" | cut -c1-300 | tail -8
  else
    echo "flux-peers: .devdata/comfyui.tar.xz is missing (scripts/device.sh flux-e2e:prepare, carry .devdata)"
    rc=1
  fi
  stamp "ComfyUI low-VRAM done"
fi
if [ "${PEER:-1}" = 1 ]; then
  PARTS=${PARTS:-dit,vae,t5} COMPILE=${COMPILE:-0} T5_DTYPES=${T5_DTYPES:-bf16,f16} T5_COMPILE_DTYPES=${T5_COMPILE_DTYPES:-f16} PYTHONPATH=bench/peers/diffusers/src:bench \
    timeout "${PEER_TIMEOUT:-330}" python3 bench/torch_peer_flux.py > "$OUT/flux_peers.log" 2>&1 || rc=1
  grep -E "^\[peer" "$OUT/flux_peers.log" | cut -c1-300 | tail -12
  stamp "diffusers / transformers done"
fi
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:  # noqa: BLE001
        print(f"({name}: {e})")
        return {}
peer, comfy = load("peer_flux.json"), load("comfy_lowvram_flux.json")
gib = lambda b: f"{b / 2**30:.2f}" if b is not None else ""  # noqa: E731
print(f"\ntorch {peer.get('torch', comfy.get('torch', '?'))}, {peer.get('device', comfy.get('device', '?'))}")
print("| Flux.1 peer row | dtype | who | ms | GPU resident / peak GiB (allocator-level) | floor ms (streamed GB / pageable H2D) |")
print("|---|---|---|---|---|---|")
bw = comfy.get("h2d_pageable_gbps")
names = {"flux_dit": "DiT step 1024^2 b1", "t5xxl_encode": "T5-XXL encode, 256 tokens",
         "flux_vae_decode": "VAE decode 1024^2"}
for key, rows in peer.get("rows", {}).items():
    for dt, r in rows.items():
        for field, who in (("eager_ms", "eager"), ("compile_ms", "torch.compile")):
            lib = "transformers" if key == "t5xxl_encode" else "diffusers"
            if field in r:
                print(f"| {names.get(key, key)} | {dt} | {lib} {who} | {r[field]:.2f} | | |")
dit = "DiT step, TINY config (dry run)" if comfy.get("tiny") else "DiT step 1024^2 b1"
for pct, r in comfy.get("rows", {}).items():
    floor = f"{r['streamed_bytes'] / bw / 1e6:.1f}" if bw else ""
    print(f"| {dit}, {pct} % resident | {comfy.get('dtype', '?').replace('torch.', '')} "
          f"| ComfyUI a125cd84 lowvram (loaded {gib(r['comfy_loaded_bytes'])} GiB) | {r['ms']:.2f} "
          f"| {gib(r.get('gpu_allocated_after_load_bytes'))} / {gib(r.get('gpu_peak_bytes'))} "
          f"| {floor} |")
if comfy:
    peak = max([r.get("host_peak_rss_bytes", 0) for r in comfy.get("rows", {}).values()] or [0])
    print(f"\nComfyUI model bytes {gib(comfy.get('model_bytes', 0))} GiB, host peak RSS {gib(peak)} GiB, "
          f"flags {comfy.get('flags')}; host to device {comfy.get('h2d_pageable_gbps', 0):.1f} GB/s "
          f"pageable, {comfy.get('h2d_pinned_gbps', 0):.1f} pinned")
for e in peer.get("errors", []) + comfy.get("errors", []):
    print("error:", e)
PY
exit $rc
