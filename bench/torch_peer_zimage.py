"""PyTorch reference for the Z-Image rows of scripts/device.sh zimage (issue 40 item 5), each with
random weights of the real shapes, timed as bench_models times headroom's (median of CUDA-event-
timed calls after warm-up), eager and torch.compile(mode="reduce-overhead") as
bench/torch_peer_flux.py compiles:
  dit    the Z-Image Turbo DiT step at 1024x1024, batch 1, bf16: diffusers'
         ZImageTransformer2DModel with Tongyi-MAI/Z-Image-Turbo's transformer config (diffusers'
         defaults: dim 3840, 30 layers, 2 noise and 2 context refiner layers, 30 heads, caption
         width 2560; 6.15 G parameters), a [16, 1, 128, 128] latent (4096 image tokens), CAP_TOKENS
         caption rows (the template prompt's length, Note [z-image bench caption] in
         bench/bench_zimage.h) and t = 0.5: the shapes of bench_zimage.h's workload_zimage.
  qwen3  the Qwen3-4B encode of QWEN_TOKENS (128) ids in bf16: transformers' Qwen3Model with
         Qwen/Qwen3-4B's config.json, built with 35 of its 36 layers and the final norm replaced
         by the identity, so that last_hidden_state is hidden_states[-2] of the whole model: what
         Z-Image's pipelines read and headroom computes (Note [LLM hidden state] in
         src/models/llm/llm_config.h), nothing more.
Values are random: timing only.

Two phases, as bench/torch_peer.py: 1. build the models, compile and warm up the compiled ones
(the DiT's compile takes 1-2 minutes of CPU, Qwen3's under one), touch READY_FILE; 2. wait for
GO_FILE (if set), then time everything with the GPU to itself. So scripts/device/zimage.sh lets
the compile overlap headroom's build, and neither side's timing overlaps the other's GPU work.

Writes $OUT/peer_zimage.json, saved after every step so a timeout keeps what was measured:
{"torch", "transformers", "device", "size", "shapes", "rows": {KEY: {"bf16": {"eager_ms",
"compile_ms", "compile_s"}}}, "errors"} with KEY zimage_dit, qwen3_4b_encode (bench_models'
workload keys). Run with PYTHONPATH=bench/peers/diffusers/src:bench (scripts/device.sh
compare:prepare copies diffusers' source there; transformers is the GPU machine's own).
  OUT (required)  PARTS=dit,qwen3  COMPILE=1|0  QWEN_COMPILE (default COMPILE)  ITERS=10
  CAP_TOKENS=23  QWEN_TOKENS=128
  GO_FILE, READY_FILE (phases; unset: no wait)  GO_WAIT=900 (s)
  DEVICE=cuda|cpu  SIZE=full|tiny (the CPU check: tiny configs of the same classes, f32)

`python3 bench/torch_peer_zimage.py table HEADROOM_JSON PEER_JSON` prints headroom's rows
(bench_models --json) against these, with the ratios and issue 40's goal for the DiT.
"""
import json
import os
import sys
import time

try:
    import torch
except ImportError:  # `table` reads JSON only
    torch = None

# Tongyi-MAI/Z-Image-Turbo transformer/config.json (diffusers' defaults but axes_lens, which
# only sizes diffusers' table of precomputed angles).
ZIMAGE_TURBO = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=3840,
                    n_layers=30, n_refiner_layers=2, n_heads=30, n_kv_heads=30, norm_eps=1e-5,
                    qk_norm=True, cap_feat_dim=2560, rope_theta=256.0, t_scale=1000.0,
                    axes_dims=[32, 48, 48], axes_lens=[1536, 512, 512])
# make-model's tiny Z-Image (Note [tiny z-image] in src/models/zimage/zimage_make_model.cpp).
ZIMAGE_TINY = dict(ZIMAGE_TURBO, dim=256, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2,
                   cap_feat_dim=32)

# Qwen/Qwen3-4B config.json (src/models/llm/llm_config.cpp llm_config_qwen3_4b has the same).
QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, hidden_act="silu",
                max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                attention_bias=False, attention_dropout=0.0, tie_word_embeddings=True,
                use_sliding_window=False, sliding_window=None, max_window_layers=36,
                use_cache=False)
QWEN3_TINY = dict(QWEN3_4B, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_window_layers=2)


DTYPES = {"bf16": "bfloat16", "f32": "float32"}


def log(msg):
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env_list(name, default):
    return [x for x in os.environ.get(name, default).split(",") if x]


def time_call(fn, iters, warmup, device):
    """Median ms of `iters` calls after `warmup`: CUDA events on the GPU (as torch_peer.time_fn),
    the wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def build(make, device):
    """The module with its parameters made on `device` (random init on the GPU takes seconds, not
    the minutes of 6 G parameters on the CPU); built on the CPU and moved where torch has no
    device contexts (1.x)."""
    if device == "cuda":
        try:
            with torch.device("cuda"):
                return make()
        except (AttributeError, TypeError) as e:
            log(f"building on the GPU failed ({e!r:.120}); building on the CPU")
    return make().to(device)


def sdpa_shim():
    """torch 1.x has no F.scaled_dot_product_attention, which diffusers' Z-Image attention
    processor requires: its math, for the CPU check only (never on the GPU's torch 2)."""
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        return

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **_):
        s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
                else s + attn_mask
        return torch.softmax(s, dim=-1) @ v

    F.scaled_dot_product_attention = sdpa
    log("torch without scaled_dot_product_attention: its math stands in (CPU check)")


class Case:
    """One model in one dtype: its eager module, its compiled form (if asked) and one call."""

    def __init__(self, key, dt, model, call):
        self.key, self.dt, self.model, self.call = key, dt, model, call
        self.compiled = None

    def step(self, module):
        def run():
            with torch.inference_mode():
                self.call(module)
        return run


class Peer:
    def __init__(self, out, iters, device, size):
        self.out, self.iters, self.device = out, iters, device
        self.result = {"torch": torch.__version__, "size": size, "shapes": {}, "rows": {},
                       "errors": [],
                       "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
        try:
            import transformers
            self.result["transformers"] = transformers.__version__
        except ImportError:
            self.result["transformers"] = None

    def save(self):
        with open(os.path.join(self.out, "peer_zimage.json"), "w") as f:
            json.dump(self.result, f, indent=1)

    def error(self, what, e):
        self.result["errors"].append(f"{what}: {e!r:.300}")
        log(self.result["errors"][-1])
        self.save()

    def row(self, case):
        return self.result["rows"].setdefault(case.key, {}).setdefault(case.dt, {})

    def compile(self, case):
        """Phase 1: torch.compile and 4 calls (the first compiles, reduce-overhead records its
        CUDA graphs on the next ones)."""
        try:
            t0 = time.time()
            case.compiled = torch.compile(case.model, mode="reduce-overhead", fullgraph=False,
                                          dynamic=False)
            step = case.step(case.compiled)
            for _ in range(4):
                step()
            if self.device == "cuda":
                torch.cuda.synchronize()
            self.row(case)["compile_s"] = time.time() - t0
            log(f"{case.key} {case.dt}: compiled and warmed up in {time.time() - t0:.0f} s")
        except Exception as e:  # noqa: BLE001 - report and keep the eager row
            case.compiled = None
            self.error(f"{case.key} {case.dt} compile", e)
        self.save()

    def time(self, case):
        """Phase 2: eager, then compiled."""
        row = self.row(case)
        try:
            row["eager_ms"] = time_call(case.step(case.model), self.iters, 2, self.device)
            log(f"{case.key} {case.dt} eager_ms {row['eager_ms']:.2f}")
            if case.compiled is not None:
                row["compile_ms"] = time_call(case.step(case.compiled), self.iters, 2, self.device)
                log(f"{case.key} {case.dt} compile_ms {row['compile_ms']:.2f}")
        except Exception as e:  # noqa: BLE001
            self.error(f"{case.key} {case.dt} timing", e)
        self.save()


def make_dit(peer, tiny, dt):
    from diffusers import ZImageTransformer2DModel
    sdpa_shim()
    cfg = ZIMAGE_TINY if tiny else ZIMAGE_TURBO
    dev, dtype = peer.device, getattr(torch, DTYPES[dt])
    t0 = time.time()
    model = build(lambda: ZImageTransformer2DModel(**cfg), dev).to(dtype).eval()
    cap = int(os.environ.get("CAP_TOKENS", "23"))
    lat = 8 if tiny else 128  # latent side: 64 or 1024 px
    x = [torch.randn(16, 1, lat, lat, dtype=dtype, device=dev)]
    cap_feats = [torch.randn(cap, cfg["cap_feat_dim"], dtype=dtype, device=dev)]
    t = torch.tensor([0.5], device=dev)  # f32, as ZImagePipeline passes it
    peer.result["shapes"]["zimage_dit"] = {"latent": [16, 1, lat, lat], "caption": cap,
                                           "image_tokens": (lat // 2) ** 2}
    log(f"Z-Image DiT built in {time.time() - t0:.0f} s, "
        f"{sum(p.numel() for p in model.parameters()) / 1e9:.3f} G parameters, {cap} caption "
        f"tokens, {(lat // 2) ** 2} image tokens")
    return Case("zimage_dit", dt, model, lambda m: m(x, t, cap_feats, return_dict=False))


def make_qwen3(peer, tiny, dt):
    from transformers import Qwen3Config, Qwen3Model
    cfg = dict(QWEN3_TINY if tiny else QWEN3_4B)
    layers = cfg["num_hidden_layers"] - 1  # hidden_states[-2]: Note [LLM hidden state]
    cfg.update(num_hidden_layers=layers, max_window_layers=layers)
    dev, dtype = peer.device, getattr(torch, DTYPES[dt])
    t0 = time.time()
    config = Qwen3Config(**cfg, attn_implementation="sdpa")
    model = build(lambda: Qwen3Model(config), dev).to(dtype).eval()
    model.norm = torch.nn.Identity()  # hidden_states[-2] is not normed
    tokens = int(os.environ.get("QWEN_TOKENS", "16" if tiny else "128"))
    ids = ((torch.arange(tokens, device=dev) * 7919 + 3) % cfg["vocab_size"])[None]
    peer.result["shapes"]["qwen3_4b_encode"] = {"tokens": tokens, "layers": layers}
    log(f"Qwen3 built in {time.time() - t0:.0f} s, {layers} layers, "
        f"{sum(p.numel() for p in model.parameters()) / 1e9:.3f} G parameters, "
        f"attention {getattr(model.config, '_attn_implementation', '?')}, {tokens} tokens")
    return Case("qwen3_4b_encode", dt, model,
                lambda m: m(input_ids=ids, use_cache=False).last_hidden_state)


def wait_for(path, seconds):
    if not path:
        return
    log(f"waiting for {path}")
    t0 = time.time()
    while not os.path.exists(path) and time.time() - t0 < seconds:
        time.sleep(0.5)
    if not os.path.exists(path):
        log(f"{path} did not appear in {seconds:.0f} s; timing anyway")


def measure():
    device = os.environ.get("DEVICE", "cuda")
    tiny = os.environ.get("SIZE", "full") == "tiny"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_peer_zimage: no CUDA device (DEVICE=cpu SIZE=tiny checks the "
                         "script on the CPU)")
    peer = Peer(os.environ["OUT"], int(os.environ.get("ITERS", "10")), device,
                "tiny" if tiny else "full")
    dt = "bf16" if device == "cuda" else "f32"  # the CPU check computes in f32, as headroom's
    compile_all = os.environ.get("COMPILE", "1")
    compiled = {"dit": compile_all, "qwen3": os.environ.get("QWEN_COMPILE", compile_all)}
    makers = {"dit": make_dit, "qwen3": make_qwen3}
    cases = []
    try:  # phase 1
        for part in env_list("PARTS", "dit,qwen3"):
            try:
                case = makers[part](peer, tiny, dt)
                if device == "cuda":
                    torch.cuda.empty_cache()  # the f32 parameters built before the cast
                if compiled[part] == "1" and hasattr(torch, "compile"):
                    peer.compile(case)
                elif compiled[part] == "1":
                    log(f"torch {torch.__version__} has no torch.compile: {part} eager only")
                cases.append(case)
            except Exception as e:  # noqa: BLE001 - one part failing leaves the others
                peer.error(f"{part} build", e)
        peer.save()
    finally:
        if os.environ.get("READY_FILE"):
            open(os.environ["READY_FILE"], "w").close()
    wait_for(os.environ.get("GO_FILE", ""), float(os.environ.get("GO_WAIT", "900")))
    for case in cases:  # phase 2
        peer.time(case)
    return 0 if not peer.result["errors"] else 1


def table(hr_path, peer_path):
    """headroom's bench_models rows against the peer's, with ratios (issue 40's DiT goal: the
    resident step <= 0.85x diffusers under torch.compile)."""
    try:
        hr = {(r["key"], r["dtype"]): r for r in json.load(open(hr_path))}
    except (OSError, ValueError) as e:
        print(f"no headroom rows ({hr_path}: {e})")
        hr = {}
    try:
        peer = json.load(open(peer_path))
    except (OSError, ValueError) as e:
        print(f"no peer rows ({peer_path}: {e})")
        peer = {}
    print(f"\ntorch {peer.get('torch', '?')}, transformers {peer.get('transformers', '?')}, "
          f"{peer.get('device', '?')} ({peer.get('size', '?')} size); shapes {peer.get('shapes')}")
    print("| headroom row | dtype | ms | peer | peer eager ms | peer torch.compile ms (compile s) "
          "| headroom / eager | headroom / compile | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = (("zimage_dit", "diffusers", 0.85), ("qwen3_4b_encode", "transformers", None))
    for key, lib, goal in rows:
        for (k, dt), r in sorted(hr.items()):
            base = "qwen3_4b_encode" if k == "qwen3_4b_encode_f32_cast" else k
            if base != key:
                continue
            name = r.get("work", k)
            if not r.get("ok"):
                print(f"| {name} | {dt} | FAILED: {r.get('error', '')[:100]} | | | | | | |")
                continue
            # The peer's row in the same dtype, its bf16 one for the f32-compute row.
            p = peer.get("rows", {}).get(key, {}).get(dt if k == base else "bf16", {})
            e, c = p.get("eager_ms"), p.get("compile_ms")
            cs = f" ({p['compile_s']:.0f} s)" if "compile_s" in p else ""
            re_ = f"{r['ms'] / e:.3f}x" if e else "-"
            rc = f"{r['ms'] / c:.3f}x" if c else "-"
            g = "-"
            if goal and k == base and c:
                g = f"<= {goal}x: {'met' if r['ms'] / c <= goal else 'MISSED'}"
            print(f"| {name} | {dt} | {r['ms']:.2f} | {lib} | {f'{e:.2f}' if e else '-'} | "
                  f"{f'{c:.2f}' if c else '-'}{cs} | {re_} | {rc} | {g} |")
    print("\nheadroom: bench_models' median (captured replays); peer: diffusers' "
          "ZImageTransformer2DModel, transformers' Qwen3Model of 35 layers without the final norm "
          "(hidden_states[-2]), medians of CUDA-event-timed calls. headroom's row with bf16 weights "
          "in an f32 computation (as ComfyUI runs the encoder) is set against the peer's bf16 one.")
    for e in peer.get("errors", []):
        print("peer error:", e)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) != 1:
        raise SystemExit(__doc__)
    return measure()


if __name__ == "__main__":
    sys.exit(main())
