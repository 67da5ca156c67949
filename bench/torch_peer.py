"""PyTorch reference for scripts/device.sh compare: SD1.5 and SDXL UNet steps (batch 2 = cond +
uncond) eager and torch.compile'd, and SD VAE decodes eager, with random weights of the real
shapes, timed the same way as headroom's bench_models (median after warm-up).

Derived from the project's shared peers/bench_torch_peer.py (same model configs, inputs, compile
mode and CUDA-event timing), trimmed to what the comparison reads (no offload modes, no bandwidth
rows), and split in two phases so that torch.compile's minutes of warm-up overlap headroom's
build and benchmark:
  1. build the models on the GPU, compile and warm up the compiled ones;
  2. wait until $GO_FILE exists (if set), then time everything with the GPU to itself.
Writes $OUT/peer_torch.json:
  {"torch": ..., "device": ..., "compile": ..., "rows": {KEY: {DTYPE: {"eager_ms", "compile_ms"}}},
   "errors": [...]}
with KEY as bench_models' Workload::key (sd15_unet, sdxl_unet, vae_decode_512/1024/2048).

diffusers: the GPU machine's Python has PyTorch and diffusers' dependencies (huggingface-hub,
safetensors, regex, Pillow) but not diffusers. `scripts/device.sh compare:prepare` copies the
shared folder's trimmed diffusers source (huggingface/diffusers 58eb52c0, src/ without pipelines;
Apache-2.0) into the git-ignored bench/peers/diffusers, which the device call carries; run with
PYTHONPATH=bench/peers/diffusers/src.

Environment:
  OUT             folder for peer_torch.json (required)
  DTYPES          eager dtypes, comma list of f16, bf16 (default f16,bf16)
  COMPILE_DTYPES  dtypes to compile (default f16; each compile of SDXL costs minutes)
  COMPILE         full (default; torch.compile of the whole UNet, mode reduce-overhead, as the
                  shared script), regional (diffusers' compile_repeated_blocks: much faster to
                  compile, slower to run; the JSON says which) or off
  COMPILE_MODELS  which UNets to compile (default sd15,sdxl)
  GO_FILE         wait for this file between the phases
  READY_FILE      created when phase 1 is done (scripts/device.sh compare's SERIAL=2 waits for it)
  ITERS           timed UNet steps per measurement (default 10); VAE decodes take 3
Absolute times move from run to run (the compiled SDXL step measured 44.9 ms one day and 35.1 ms
the next on the same kind of GPU): compare only figures taken in the same run.
"""
import json, os, subprocess, sys, time

import torch

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    cross_attention_dim=768, attention_head_dim=8,
)
SDXL_UNET = dict(
    sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280),
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20),
    cross_attention_dim=2048, use_linear_projection=True,
    addition_embed_type="text_time", addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816,
)
SD_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
)
UNETS = (("sd15", 512, SD15_UNET), ("sdxl", 1024, SDXL_UNET))


def log(msg):
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env_list(name, default):
    return [x for x in os.environ.get(name, default).split(",") if x]


def time_fn(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def on_gpu(make):
    """Builds a module with its parameters created on the GPU (random init there is seconds,
    not the minutes of SDXL's 2.6 B parameters on the CPU); falls back to the CPU."""
    try:
        with torch.device("cuda"):
            return make()
    except Exception as e:  # noqa: BLE001 - an older torch without device contexts
        log(f"building on the GPU failed ({e!r:.120}); building on the CPU")
        return make().to("cuda")


def unet_inputs(kind, res, dtype):
    lat = res // 8
    x = torch.randn(2, 4, lat, lat, dtype=dtype, device="cuda")
    t = torch.tensor([500.0, 500.0], device="cuda")
    if kind == "sd15":
        return (x, t, torch.randn(2, 77, 768, dtype=dtype, device="cuda")), {}
    ctx = torch.randn(2, 77, 2048, dtype=dtype, device="cuda")
    added = {"text_embeds": torch.randn(2, 1280, dtype=dtype, device="cuda"),
             "time_ids": torch.randn(2, 6, dtype=dtype, device="cuda")}
    return (x, t, ctx), {"added_cond_kwargs": added}


class Unet:
    """One UNet in one dtype: the eager module, and its compiled form if asked for."""

    def __init__(self, kind, res, cfg, dtype, compile_mode):
        from diffusers import UNet2DConditionModel
        self.kind, self.res = kind, res
        self.model = on_gpu(lambda: UNet2DConditionModel(**cfg)).to(dtype).eval()
        self.args, self.kwargs = unet_inputs(kind, res, dtype)
        self.compiled = None
        if compile_mode == "full":
            self.compiled = torch.compile(self.model, mode="reduce-overhead", fullgraph=False,
                                          dynamic=False)
        elif compile_mode == "regional":
            import copy
            self.compiled = copy.deepcopy(self.model)
            self.compiled.compile_repeated_blocks(mode="reduce-overhead", fullgraph=True,
                                                  dynamic=False)

    def step_fn(self, module):
        @torch.inference_mode()
        def step():
            module(*self.args, **self.kwargs)
        return step


def main():
    out = os.environ["OUT"]
    iters = int(os.environ.get("ITERS", "10"))
    dtypes = env_list("DTYPES", "f16,bf16")
    compile_dtypes = env_list("COMPILE_DTYPES", "f16")
    compile_mode = os.environ.get("COMPILE", "full")
    compile_models = env_list("COMPILE_MODELS", "sd15,sdxl")
    go_file = os.environ.get("GO_FILE", "")
    result = {"torch": torch.__version__, "cuda": torch.version.cuda,
              "device": torch.cuda.get_device_name(0), "compile": compile_mode, "rows": {}, "errors": []}

    def record(key, dt, field, value):
        result["rows"].setdefault(key, {}).setdefault(dt, {})[field] = value
        log(f"{key} {dt} {field} {value:.3f}")

    def save():
        with open(os.path.join(out, "peer_torch.json"), "w") as f:
            json.dump(result, f, indent=1)

    # Phase 1: models, and the compiled ones compiled and warmed up (4 calls: the first compiles,
    # reduce-overhead records its CUDA graphs on the next ones).
    unets = []
    for kind, res, cfg in UNETS:
        for dt in dtypes + [d for d in compile_dtypes if d not in dtypes]:
            mode = compile_mode if dt in compile_dtypes and kind in compile_models else "off"
            try:
                u = Unet(kind, res, cfg, DTYPES[dt], mode)
                if u.compiled is not None:
                    t0 = time.time()
                    step = u.step_fn(u.compiled)
                    for _ in range(4):
                        step()
                    torch.cuda.synchronize()
                    log(f"{kind} {dt}: compiled ({mode}) and warmed up in {time.time() - t0:.0f} s")
                unets.append((dt, u))
            except Exception as e:  # noqa: BLE001 - report and go on with the rest
                result["errors"].append(f"{kind} {dt} build/compile: {e!r:.300}")
                log(result["errors"][-1])
    save()
    ready_file = os.environ.get("READY_FILE", "")
    if ready_file:
        open(ready_file, "w").close()

    if go_file:
        log(f"waiting for {go_file}")
        while not os.path.exists(go_file):
            time.sleep(1)

    # Phase 2: timing, the GPU to ourselves. The host's load and the SM clock first: eager steps
    # are launch-bound, so a busy or slow host shows in them (scripts/device.sh compare).
    try:
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,"
                              "power.draw", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip()
        log(f"machine before timing: {smi}; load {load}")
    except Exception as e:  # noqa: BLE001
        log(f"machine state unknown ({e!r:.80})")
    for dt, u in unets:
        key = f"{u.kind}_unet"
        try:
            if dt in dtypes:
                record(key, dt, "eager_ms", time_fn(u.step_fn(u.model), iters, warmup=2))
            if u.compiled is not None:
                record(key, dt, "compile_ms", time_fn(u.step_fn(u.compiled), iters, warmup=2))
        except Exception as e:  # noqa: BLE001
            result["errors"].append(f"{key} {dt} timing: {e!r:.300}")
            log(result["errors"][-1])
    del unets
    torch.cuda.empty_cache()

    from diffusers import AutoencoderKL
    for dt in dtypes:
        try:
            vae = on_gpu(lambda: AutoencoderKL(**SD_VAE, sample_size=512)).to(DTYPES[dt]).eval()
        except Exception as e:  # noqa: BLE001
            result["errors"].append(f"vae {dt} build: {e!r:.300}")
            continue
        for res in (512, 1024, 2048):
            z = torch.randn(1, 4, res // 8, res // 8, dtype=DTYPES[dt], device="cuda")

            @torch.inference_mode()
            def dec():
                vae.decode(z)

            try:
                record(f"vae_decode_{res}", dt, "eager_ms", time_fn(dec, 3, warmup=1))
            except Exception as e:  # noqa: BLE001
                result["errors"].append(f"vae_decode_{res} {dt}: {e!r:.300}")
            del z
            torch.cuda.empty_cache()
        del vae
        torch.cuda.empty_cache()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
