"""ComfyUI's own low-VRAM path on the Flux.1-dev DiT step (issue 39 item 7, the peer of
headroom's streamed rows): ComfyUI a125cd84's Flux (comfy/ldm/flux/model.py through
comfy.model_base.Flux), its configuration found by comfy.model_detection from the flux-dev key
layout, its dtype chosen by comfy.model_management.unet_dtype / unet_manual_cast, wrapped in
comfy.model_patcher.ModelPatcher and loaded by comfy.model_management.LoadedModel.model_load, the
call load_models_gpu makes, with lowvram_model_memory = RESIDENT % of the model's bytes in place
of the figure load_models_gpu derives from free memory (0 % is NO_VRAM's 0.1 byte: a 0 would mean
a full load; 100 % is the full load). ModelPatcher.load then keeps the largest modules that fit on
the GPU and marks the rest comfy_cast_weights, so comfy/ops.py copies their weights to the GPU at
every forward (from pageable host memory, as ComfyUI's loader leaves them; COMFY_ARGS=
--async-offload for ComfyUI's two-stream variant).

The step: BaseModel.apply_model on a 1024x1024 latent, batch 1 (4096 image tokens, 512 T5
tokens, the pooled CLIP vector, guidance 3.5, sigma 1), timed as bench/torch_peer.py's time_fn
(median of CUDA-event-timed steps after warm-up). Random weights of the real shapes (bf16 on the
H200): the module is built as ComfyUI builds it (comfy.ops.disable_weight_init, no init: empty
host tensors), then filled tensor by tensor from the GPU's random generator (seconds for 23.8 GB).
Values are random: timing only.

Writes $OUT/comfy_lowvram_flux.json and prints it: per RESIDENT % the ms per step, ComfyUI's own
count of the loaded bytes (ModelPatcher.loaded_size), the GPU bytes after loading and the peak
during the steps (torch.cuda.memory_allocated / max_memory_allocated: allocator-level, not the
driver's), the bytes left on the host (streamed at every step), the host's peak RSS, and the
host-to-device copy rate of one GiB, pageable and pinned (the floor of a streamed row is its
streamed bytes at that rate).

  python3 bench/comfy_lowvram_flux.py --comfy COMFYUI_DIR   (ComfyUI a125cd84's files)
  OUT (default .)  RESIDENT=0,25,50,75,100  ITERS=5  WARMUP=1  COMFY_ARGS="" (ComfyUI's own flags)
  TINY=1: a tiny configuration (the same keys and code, 2+2 blocks of width 64): the dry run on a
          machine without a GPU (torch >= 1.13, CPU; ComfyUI's --cpu, so nothing moves, but the
          partial-load decisions and the cast-on-the-fly forward run).
  --list-comfy-files: the ComfyUI files this script imports (for scripts/device/comfyui-files.txt).
Missing Python packages are stubbed or shimmed by the e2e golden generator's helpers
(tests/data/comfy_harness.py), the same as for its run.
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# comfy.model_detection reads Flux's configuration from key names and two shapes: these keys of
# a flux1-dev.safetensors (19 double blocks, 38 single blocks, guidance_in: dev) are what it looks at.
DEV_DOUBLE, DEV_SINGLE = 19, 38
TINY_CONFIG = {"hidden_size": 64, "num_heads": 2, "axes_dim": [4, 14, 14], "depth": 2,
               "depth_single_blocks": 2, "context_in_dim": 32, "vec_in_dim": 16}


def log(msg):
    print(f"[comfy-lowvram {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def import_comfy(comfy_dir, cpu):
    """ComfyUI's modules importable: absent packages stubbed (torchsde on the GPU machine),
    einops / tqdm / F.scaled_dot_product_attention shimmed on an old torch; ComfyUI's own
    flags from COMFY_ARGS (plus --cpu without a GPU)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
    import importlib.util
    import comfy_harness as harness
    missing = {r for r in harness.STUB_WHEN_MISSING if importlib.util.find_spec(r) is None}
    for name, shim in (("einops", harness.einops_shim), ("tqdm", harness._tqdm_shim)):
        if name in missing:
            shim()
            missing.discard(name)
    harness.stub_packages(missing)
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        harness._sdpa_shim()
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0]] + os.environ.get("COMFY_ARGS", "").split() + (["--cpu"] if cpu else [])
    import comfy.model_management  # noqa: F401 - reads the flags once
    log(f"stubbed: {sorted(missing) or 'none'}; ComfyUI flags: {sys.argv[1:] or 'none'}")


def dev_keys(hidden=3072, ctx_in=4096, vec_in=768, patch_in=64):
    """The flux1-dev state dict as model_detection sees it (meta tensors: names and shapes)."""
    meta = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    sd = {"img_in.weight": meta(hidden, patch_in), "txt_in.weight": meta(hidden, ctx_in),
          "vector_in.in_layer.weight": meta(hidden, vec_in),
          "guidance_in.in_layer.weight": meta(hidden, 256)}
    for i in range(DEV_DOUBLE):
        sd[f"double_blocks.{i}.img_attn.norm.key_norm.scale"] = meta(128)
    for i in range(DEV_SINGLE):
        sd[f"single_blocks.{i}.norm.key_norm.scale"] = meta(128)
    return sd


def build_patcher(tiny):
    """ComfyUI's load_diffusion_model_state_dict steps (comfy/sd.py) without a file: detect,
    choose the dtype, build on the offload device, wrap in a ModelPatcher."""
    import comfy.model_detection
    import comfy.model_management as mm
    import comfy.model_patcher
    model_config = comfy.model_detection.model_config_from_unet(dev_keys(), "")
    assert type(model_config).__name__ == "Flux", f"detected {type(model_config).__name__}"
    if tiny:
        model_config.unet_config.update(TINY_CONFIG)
    load_device, offload_device = mm.get_torch_device(), mm.unet_offload_device()
    params = count_parameters(model_config)  # comfy.utils.calculate_parameters of the file
    unet_dtype = mm.unet_dtype(model_params=params, weight_dtype=torch.bfloat16,
                               supported_dtypes=list(model_config.supported_inference_dtypes))
    manual_cast = mm.unet_manual_cast(unet_dtype, load_device, model_config.supported_inference_dtypes)
    model_config.set_inference_dtype(unet_dtype, manual_cast)
    t0 = time.time()
    model = model_config.get_model({}, "").to(offload_device)
    fill_random(model, load_device)
    log(f"built {sum(p.numel() for p in model.parameters()) / 1e9:.3f} G parameters "
        f"({unet_dtype}, manual cast {manual_cast}) on {offload_device}, load device "
        f"{load_device}, in {time.time() - t0:.0f} s; unet_config {model_config.unet_config}")
    return comfy.model_patcher.ModelPatcher(model, load_device=load_device,
                                            offload_device=offload_device)


def count_parameters(model_config):
    """The parameter count ComfyUI's loader takes from the file, here from a meta-device build."""
    import comfy.ldm.flux.model
    import comfy.ops
    cfg = {k: v for k, v in model_config.unet_config.items() if k != "dtype"}
    net = comfy.ldm.flux.model.Flux(**cfg, device="meta", operations=comfy.ops.disable_weight_init)
    return sum(p.numel() for p in net.parameters())


@torch.no_grad()
def fill_random(model, device):
    """Weights 1/sqrt(fan_in)-scaled normals, biases 0, norm scales 1, drawn on the load device
    (the GPU: fast) and copied into the host tensors one by one."""
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            fan_in = p[0].numel()
            g = torch.randn(p.shape, device=device, dtype=p.dtype).mul_(fan_in ** -0.5)
            p.copy_(g)
            del g
        else:
            p.fill_(0.0 if name.endswith("bias") else 1.0)


def step_inputs(device, tiny):
    """1024x1024 in latent terms: 16x128x128; T5's 512 tokens; CLIP-L's pooled vector."""
    lat, txt = (16, 16) if tiny else (128, 512)
    ctx_in, vec_in = (TINY_CONFIG["context_in_dim"], TINY_CONFIG["vec_in_dim"]) if tiny else (4096, 768)
    return dict(x=torch.randn(1, 16, lat, lat, device=device),
                t=torch.tensor([1.0], device=device),
                c_crossattn=torch.randn(1, txt, ctx_in, device=device),
                y=torch.randn(1, vec_in, device=device),
                guidance=torch.tensor([3.5], device=device))


def time_fn(fn, iters, warmup, cuda):
    """torch_peer.time_fn's rule (median of CUDA-event-timed calls); wall clock on the CPU."""
    if cuda:
        sys.path.insert(0, HERE)
        from torch_peer import time_fn as cuda_time_fn
        return cuda_time_fn(fn, iters, warmup)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def h2d_gbps(pinned, nbytes=1 << 30, reps=3):
    """Host-to-device copy rate of one GiB (best of reps), pageable as ComfyUI's weights, or pinned."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=pinned)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def host_peak_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run_resident(patcher, pct, inputs, iters, warmup, cuda):
    """One row: load with lowvram_model_memory = pct % of the model's bytes as load_models_gpu
    hands it to LoadedModel.model_load, time the step, unload (detach) again."""
    import comfy.model_management as mm
    size = patcher.model_size()
    lowvram = 0 if pct >= 100 else max(0.1, size * pct / 100)
    loaded = mm.LoadedModel(patcher)
    t0 = time.time()
    loaded.model_load(lowvram)
    if cuda:
        torch.cuda.synchronize()
    load_s = time.time() - t0
    cast = [m for m in patcher.model.modules() if getattr(m, "comfy_cast_weights", False)]
    row = {"lowvram_model_memory": lowvram, "comfy_loaded_bytes": patcher.loaded_size(),
           "cast_on_the_fly_modules": len(cast),
           "model_lowvram": bool(patcher.model.model_lowvram), "load_s": round(load_s, 2)}
    if cuda:
        row["gpu_allocated_after_load_bytes"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    model = patcher.model

    def step():
        model.apply_model(transformer_options={}, **inputs)

    with torch.inference_mode():
        row["ms"] = time_fn(step, iters, warmup, cuda)
    if cuda:
        row["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
    loaded.model_unload()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    row["host_peak_rss_bytes"] = host_peak_bytes()
    row["streamed_bytes"] = size - row["comfy_loaded_bytes"]
    return row


def list_comfy_files(comfy_dir):
    root = os.path.abspath(comfy_dir)
    files = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f and os.path.abspath(f).startswith(root + os.sep):
            files.add(os.path.relpath(os.path.abspath(f), root))
    return sorted(files)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfy", required=True, help="ComfyUI a125cd84's files")
    ap.add_argument("--list-comfy-files", action="store_true")
    a = ap.parse_args()
    tiny = os.environ.get("TINY", "0") == "1"
    cuda = torch.cuda.is_available()
    import_comfy(a.comfy, cpu=not cuda)
    import comfy.model_management as mm
    patcher = build_patcher(tiny)
    pcts = [int(p) for p in os.environ.get("RESIDENT", "0,25,50,75,100").split(",") if p]
    iters, warmup = int(os.environ.get("ITERS", "5")), int(os.environ.get("WARMUP", "1"))
    inputs = step_inputs(mm.get_torch_device(), tiny)
    result = {"torch": torch.__version__, "comfyui": "a125cd84",
              "device": torch.cuda.get_device_name(0) if cuda else "cpu",
              "tiny": tiny, "flags": sys.argv[1:], "dtype": str(patcher.model_dtype()),
              "model_bytes": patcher.model_size(),
              "gpu_memory": "allocator-level (torch.cuda.memory_allocated / max_memory_allocated)",
              "rows": {},
              "errors": []}
    out = os.path.join(os.environ.get("OUT", "."), "comfy_lowvram_flux.json")
    if cuda:  # the floor of a streamed row: its host bytes at this rate
        result["h2d_pageable_gbps"], result["h2d_pinned_gbps"] = h2d_gbps(False), h2d_gbps(True)
        log(f"host to device: pageable {result['h2d_pageable_gbps']:.1f} GB/s, "
            f"pinned {result['h2d_pinned_gbps']:.1f} GB/s")
        torch.cuda.empty_cache()
    for pct in pcts:
        try:
            row = run_resident(patcher, pct, inputs, iters, warmup, cuda)
            result["rows"][str(pct)] = row
            log(f"resident {pct} %: {row['ms']:.2f} ms, ComfyUI loaded "
                f"{row['comfy_loaded_bytes'] / 2**30:.2f} GiB, "
                f"GPU peak {row.get('gpu_peak_bytes', 0) / 2**30:.2f} GiB")
        except Exception as e:  # noqa: BLE001 - report it and go on with the other rows
            result["errors"].append(f"resident {pct}: {e!r:.300}")
            log(result["errors"][-1])
            if cuda:
                torch.cuda.empty_cache()
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    if a.list_comfy_files:
        print("\n".join(list_comfy_files(a.comfy)))
    del patcher  # its __del__ detaches: while ComfyUI's modules are still there
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
