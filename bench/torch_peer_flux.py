"""PyTorch reference for scripts/device.sh flux: the Flux.1-dev DiT step at 1024x1024, batch 1,
bf16 (4096 image tokens, 512 T5 tokens, guidance), diffusers' FluxTransformer2DModel with random
weights of the real shapes, eager and torch.compile(mode="reduce-overhead"), timed as
bench_models times headroom's (median of CUDA-event-timed steps after warm-up). Same inputs as
bench_common.h's workload_flux in shape (values are random: timing only).

Writes $OUT/peer_flux.json: {"torch", "device", "rows": {"flux_dit": {"bf16": {"eager_ms",
"compile_ms"}}}, "errors"}. Run with PYTHONPATH=bench/peers/diffusers/src (compare:prepare copies
diffusers' source there).
  OUT (required)  ITERS=10  COMPILE=1|0
"""
import json
import os
import time

import torch

from torch_peer import log, on_gpu, time_fn


def flux_inputs(dtype):
    dev = "cuda"
    img_ids = torch.zeros(64, 64, 3, device=dev)
    img_ids[..., 1] = torch.arange(64, device=dev)[:, None]
    img_ids[..., 2] = torch.arange(64, device=dev)[None, :]
    return dict(
        hidden_states=torch.randn(1, 4096, 64, dtype=dtype, device=dev),
        encoder_hidden_states=torch.randn(1, 512, 4096, dtype=dtype, device=dev),
        pooled_projections=torch.randn(1, 768, dtype=dtype, device=dev),
        timestep=torch.tensor([1.0], device=dev),  # the model multiplies by 1000, as ComfyUI's
        img_ids=img_ids.reshape(-1, 3),
        txt_ids=torch.zeros(512, 3, device=dev),
        guidance=torch.tensor([3.5], device=dev),
        return_dict=False,
    )


def main():
    from diffusers import FluxTransformer2DModel

    out = os.environ["OUT"]
    iters = int(os.environ.get("ITERS", "10"))
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": {},
              "errors": []}
    dtype = torch.bfloat16
    t0 = time.time()
    model = on_gpu(lambda: FluxTransformer2DModel(guidance_embeds=True)).to(dtype).eval()
    log(f"flux dit built in {time.time() - t0:.0f} s, "
        f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters")
    inputs = flux_inputs(dtype)
    row = result["rows"].setdefault("flux_dit", {}).setdefault("bf16", {})

    def save():
        with open(os.path.join(out, "peer_flux.json"), "w") as f:
            json.dump(result, f, indent=1)

    with torch.inference_mode():
        row["eager_ms"] = time_fn(lambda: model(**inputs), iters, 2)
        log(f"flux_dit bf16 eager_ms {row['eager_ms']:.2f}")
        save()  # the eager row stays if the compile runs out of time
        if os.environ.get("COMPILE", "1") == "1":
            try:
                compiled = torch.compile(model, mode="reduce-overhead", fullgraph=False)
                t0 = time.time()
                for _ in range(4):
                    compiled(**inputs)
                torch.cuda.synchronize()
                log(f"compiled and warmed up in {time.time() - t0:.0f} s")
                row["compile_ms"] = time_fn(lambda: compiled(**inputs), iters, 2)
                log(f"flux_dit bf16 compile_ms {row['compile_ms']:.2f}")
            except Exception as e:  # noqa: BLE001 - report and keep the eager row
                result["errors"].append(f"compile: {e!r:.300}")
    save()


if __name__ == "__main__":
    main()
