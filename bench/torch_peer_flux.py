"""PyTorch reference for the Flux.1 rows of scripts/device.sh flux and flux-peers (issue 39 item
7), each with random weights of the real shapes, timed as bench_models times headroom's (median
of CUDA-event-timed calls after warm-up):
  dit  the Flux.1-dev DiT step at 1024x1024, batch 1, bf16 (4096 image tokens, 512 T5 tokens,
       guidance): diffusers' FluxTransformer2DModel, eager and torch.compile(mode=
       "reduce-overhead"). Same inputs as bench_common.h's workload_flux in shape.
  t5   the T5-XXL encode of a 256-token prompt (Flux's T5 padding minimum): transformers'
       T5EncoderModel with google/t5-v1_1-xxl's configuration (d_model 4096, d_ff 10240, 24
       layers, 64 heads of 64, vocabulary 32128, gated-gelu), in T5_DTYPES, eager and compiled.
  vae  the Flux VAE decode at 1024x1024 (a 1x16x128x128 latent to 1x3x1024x1024): diffusers'
       AutoencoderKL with Flux's ae configuration (16 latent channels, 128/256/512/512, 2 layers
       a block, no quant convs: ComfyUI comfy/sd.py builds the same Decoder for ae.safetensors,
       ch 128, ch_mult 1/2/4/4, 2 res blocks, z_channels from decoder.conv_in), in VAE_DTYPES.
Values are random: timing only.

Writes $OUT/peer_flux.json: {"torch", "device", "rows": {KEY: {DTYPE: {"eager_ms",
"compile_ms"}}}, "errors"} with KEY flux_dit, t5xxl_encode, flux_vae_decode (bench_models'
workload keys), saved after every row so a timeout keeps what was measured. Run with
PYTHONPATH=bench/peers/diffusers/src:bench (compare:prepare copies diffusers' source there;
transformers is the GPU machine's own).
  OUT (required)  PARTS=dit,vae,t5 (the order they run in)  ITERS=10
  COMPILE=1|0 (the DiT: minutes)  T5_COMPILE=1|0  VAE_COMPILE=0|1
  T5_DTYPES=f16,bf16  T5_COMPILE_DTYPES (default T5_DTYPES)  VAE_DTYPES=bf16  T5_TOKENS=256
"""
import json
import os
import time

import torch

from torch_peer import log, on_gpu, time_fn

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}

# google/t5-v1_1-xxl's config.json (the encoder half is what Flux uses).
T5_XXL = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
              relative_attention_num_buckets=32, relative_attention_max_distance=128,
              feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, dropout_rate=0.0,
              tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False)

# black-forest-labs/FLUX.1-dev vae/config.json in diffusers' terms.
FLUX_VAE = dict(in_channels=3, out_channels=3, latent_channels=16, layers_per_block=2,
                block_out_channels=(128, 256, 512, 512),
                down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=32, sample_size=1024,
                scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                use_post_quant_conv=False, mid_block_add_attention=True)


def env_list(name, default):
    return [x for x in os.environ.get(name, default).split(",") if x]


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


class Peer:
    """The result JSON, and one timed row: eager, then (if asked) torch.compile'd."""

    def __init__(self, out, iters):
        self.out, self.iters = out, iters
        self.result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                       "rows": {}, "errors": []}

    def save(self):
        with open(os.path.join(self.out, "peer_flux.json"), "w") as f:
            json.dump(self.result, f, indent=1)

    def error(self, what, e):
        self.result["errors"].append(f"{what}: {e!r:.300}")
        log(self.result["errors"][-1])
        self.save()

    def time_row(self, key, dt, model, call, compile_it, iters=None, warmup=2):
        """call(module) runs one step; the eager row is saved before the compile starts."""
        iters = iters or self.iters
        row = self.result["rows"].setdefault(key, {}).setdefault(dt, {})
        with torch.inference_mode():
            row["eager_ms"] = time_fn(lambda: call(model), iters, warmup)
            log(f"{key} {dt} eager_ms {row['eager_ms']:.2f}")
            self.save()
            if not compile_it:
                return
            try:
                compiled = torch.compile(model, mode="reduce-overhead", fullgraph=False)
                t0 = time.time()
                for _ in range(4):  # the first compiles, reduce-overhead records on the next
                    call(compiled)
                torch.cuda.synchronize()
                log(f"{key} {dt}: compiled and warmed up in {time.time() - t0:.0f} s")
                row["compile_ms"] = time_fn(lambda: call(compiled), iters, warmup)
                log(f"{key} {dt} compile_ms {row['compile_ms']:.2f}")
            except Exception as e:  # noqa: BLE001 - report and keep the eager row
                self.error(f"{key} {dt} compile", e)
        self.save()


def free():
    """Between models: drop compiled graphs (they hold the last model's weights and CUDA-graph
    pools) and cached blocks."""
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 - a torch without dynamo
        pass
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run_dit(peer):
    from diffusers import FluxTransformer2DModel
    t0 = time.time()
    model = on_gpu(lambda: FluxTransformer2DModel(guidance_embeds=True)).to(torch.bfloat16).eval()
    log(f"flux dit built in {time.time() - t0:.0f} s, "
        f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters")
    inputs = flux_inputs(torch.bfloat16)
    peer.time_row("flux_dit", "bf16", model, lambda m: m(**inputs),
                  os.environ.get("COMPILE", "1") == "1")
    model = inputs = None
    free()


def run_t5(peer):
    from transformers import T5Config, T5EncoderModel
    tokens = int(os.environ.get("T5_TOKENS", "256"))
    ids = torch.randint(0, T5_XXL["vocab_size"], (1, tokens), device="cuda")
    dtypes = env_list("T5_DTYPES", "f16,bf16")
    compiled = env_list("T5_COMPILE_DTYPES", ",".join(dtypes))
    compile_it = os.environ.get("T5_COMPILE", "1") == "1"
    for dt in dtypes:
        try:
            t0 = time.time()
            model = on_gpu(lambda: T5EncoderModel(T5Config(**T5_XXL))).to(DTYPES[dt]).eval()
            log(f"t5xxl {dt} built in {time.time() - t0:.0f} s, "
                f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters")
            peer.time_row("t5xxl_encode", dt, model, lambda m: m(input_ids=ids),
                          compile_it and dt in compiled)
        except Exception as e:  # noqa: BLE001 - report and go on with the next dtype
            peer.error(f"t5xxl_encode {dt}", e)
        model = None
        free()


class VaeDecode(torch.nn.Module):
    """vae.decode as a module's forward, so that torch.compile (VAE_COMPILE=1) compiles it."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, z):
        return self.vae.decode(z, return_dict=False)[0]


def run_vae(peer):
    from diffusers import AutoencoderKL
    compile_it = os.environ.get("VAE_COMPILE", "0") == "1"
    for dt in env_list("VAE_DTYPES", "bf16"):
        try:
            vae = VaeDecode(on_gpu(lambda: AutoencoderKL(**FLUX_VAE)).to(DTYPES[dt]).eval())
            z = torch.randn(1, 16, 128, 128, dtype=DTYPES[dt], device="cuda")
            peer.time_row("flux_vae_decode", dt, vae, lambda m: m(z), compile_it,
                          iters=min(peer.iters, 5), warmup=1)
        except Exception as e:  # noqa: BLE001
            peer.error(f"flux_vae_decode {dt}", e)
        vae = z = None
        free()


def main():
    if not torch.cuda.is_available():
        raise SystemExit("torch_peer_flux: no CUDA device (this script times on the GPU only)")
    peer = Peer(os.environ["OUT"], int(os.environ.get("ITERS", "10")))
    parts = {"dit": run_dit, "t5": run_t5, "vae": run_vae}
    for name in env_list("PARTS", "dit,vae,t5"):
        try:
            parts[name](peer)
        except Exception as e:  # noqa: BLE001 - one part failing leaves the others' rows
            peer.error(name, e)
            free()
    peer.save()


if __name__ == "__main__":
    main()
