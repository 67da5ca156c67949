#!/usr/bin/env python3
"""End-to-end fp8 reference (issue 38 item 4): ComfyUI's own code (commit a125cd84) running two
API workflows on tests/data/golden/tiny-sd1.safetensors with the diffusion model stored in
float8_e4m3fn, on the CPU in float32 (ComfyUI's manual_cast dequantizes each weight before use),
stage by stage:
  unet   UNETLoader(weight_dtype fp8_e4m3fn) for the MODEL, CheckpointLoaderSimple's CLIP and VAE;
  flags  CheckpointLoaderSimple under ComfyUI's --fp8_e4m3fn-unet --fp8_e4m3fn-text-enc: the
         UNet and the text encoder stored in float8_e4m3fn.

Usage: make_fp8_e2e_golden.py --comfy COMFYUI_DIR [--out DIR] [--tokens-from FILE]
  COMFYUI_DIR: ComfyUI a125cd84's files (comfy/, node_helpers.py, comfy/sd1_tokenizer with the
  CLIP vocabulary). --out: where fp8-e2e-golden.safetensors, fp8-e2e-cases.json and the PNGs go
  (default: beside this script).
  --tokens-from: ../../golden/golden-tokenizer.json (ComfyUI SD1Tokenizer's token-weight pairs
  for its prompts), used INSTEAD of ComfyUI's tokenizer. Only for a dry run on a machine without
  transformers; the golden records which in its metadata ("tokens").

torch < 2.1 has no float8: the script then stands bfloat16 in for torch.float8_e4m3fn (it holds
every e4m3fn value exactly) and, after each load, sets every stand-in parameter to the
round-to-nearest-even e4m3fn value of the file's tensor, which is what copying into a real
float8 parameter does. A golden made that way says so in its metadata ("shimmed") and must not
be committed: the golden comes from torch >= 2.1 (scripts/device.sh fp8-e2e). Stubs and shims
for absent packages are ../../comfy_harness.py's.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(os.path.dirname(HERE))  # tests/data
sys.path.insert(0, DATA)
from comfy_harness import (  # noqa: E402
    import_comfy, load_safetensors, sample_recording_steps, save_png, save_safetensors)

CHECKPOINT = os.path.join(DATA, "golden", "tiny-sd1.safetensors")
CKPT_NAME = "tiny-sd1.safetensors"
PREFIX_UNET = "model.diffusion_model."
SEED = 20261203
STEPS = 4
CFG = 5.0
WIDTH = HEIGHT = 64
# The tiny checkpoint's text encoder (../../golden/README: width 32, 2 layers, 4 heads); the
# UNet's 8 heads are SD15's own unet_extra_config. Shapes show neither.
CLIP_CONFIG = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
               "num_hidden_layers": 2}
VAE_DDCONFIG = {"double_z": True, "z_channels": 4, "resolution": 64, "in_channels": 3,
                "out_ch": 3, "ch": 32, "ch_mult": [1, 2, 2, 2], "num_res_blocks": 2,
                "attn_resolutions": [], "dropout": 0.0}
CASES = [
    {"name": "unet", "args": [], "unet_loader": True,
     "pos": "a photograph of an astronaut riding a horse", "neg": ""},
    {"name": "flags", "args": ["--fp8_e4m3fn-unet", "--fp8_e4m3fn-text-enc"], "unet_loader": False,
     "pos": "a (red:1.3) car, ((blue sky)), [not weighted], \\(escaped\\) parens, (soft light:0.5)",
     "neg": ""},
]


# ---------------------------------------------------------------- float8 on torch < 2.1 (dry run)

def e4m3fn_rne(x):
    """Round-to-nearest-even float8_e4m3fn of float32 values (|x| < 464 here: the tiny weights),
    as float32: quantum 2^(e-3) for exponent e >= -6 (normals), 2^-9 below (subnormals)."""
    a = x.double().numpy()
    assert np.all(np.abs(a) < 464), "value outside e4m3fn's finite rounding range"
    e = np.floor(np.log2(np.where(a == 0, 1.0, np.abs(a))))
    q = np.exp2(np.maximum(e, -6.0) - 3.0)
    return torch.from_numpy((np.rint(a / q) * q).astype(np.float32))


class Float8StandIn:
    """Installed only when torch has no float8_e4m3fn (after ComfyUI is imported, so its own
    lists of float8 types stay empty as on an old torch)."""

    def __init__(self):
        self.active = not hasattr(torch, "float8_e4m3fn")
        if self.active:
            torch.float8_e4m3fn = torch.bfloat16

    def after_load(self, module, source):
        """Every stand-in parameter of `module` gets the RNE e4m3fn value of source[name]."""
        if not self.active:
            return
        n = 0
        for name, p in module.state_dict(keep_vars=True).items():
            if p.dtype == torch.float8_e4m3fn and name in source:  # not: never-loaded ones
                p.data.copy_(e4m3fn_rne(source[name].float()))
                n += 1
        print(f"dry run: {n} stand-in parameters set to their e4m3fn values")

    def check(self):
        """e4m3fn_rne against the nearest value of the format's grid, ties to the even code
        (e4m3fn from its definition: codes 0..0x7e, exponent bias 7, 3 mantissa bits)."""
        if not self.active:
            return
        grid = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                         for e in range(16) for m in range(8)][:0x7F])
        mids = (grid[1:] + grid[:-1]) / 2
        vals = np.concatenate([grid, -grid, mids, -mids, grid * 1.0001, grid * 0.9999,
                               np.array([0.3, -1.0625, 447.0, -460.0, 0.01171875, 2.0 ** -11])])
        vals = vals[np.abs(vals) < 464].astype(np.float32)
        got = e4m3fn_rne(torch.from_numpy(vals)).numpy()
        for v, g in zip(vals.astype(np.float64), got):
            d = np.abs(grid - abs(v))
            best = [c for c in range(len(grid)) if d[c] == d.min()]
            code = best[0] if len(best) == 1 else next(c for c in best if c % 2 == 0)
            assert g == np.copysign(grid[code], v) or (g == 0 and grid[code] == 0), (v, g)


def baddbmm_shim():
    """torch < 2 only: its CPU baddbmm lets NaN through from `input` under beta=0 (measured here:
    ComfyUI's sub-quadratic attention passes an uninitialised torch.empty there, so some runs
    came out NaN). With beta=0 the input is to be ignored: alpha * (b1 @ b2)."""
    if int(torch.__version__.split(".")[0]) >= 2:
        return ""
    real = torch.baddbmm

    def baddbmm(inp, b1, b2, *, beta=1, alpha=1, out=None):
        if beta == 0 and out is None:
            return torch.bmm(b1, b2) * alpha if alpha != 1 else torch.bmm(b1, b2)
        return real(inp, b1, b2, beta=beta, alpha=alpha, out=out)
    torch.baddbmm = baddbmm
    return ",torch.baddbmm beta=0 (shim: alpha * bmm)"


# ---------------------------------------------------------------- loading, as the nodes do

def model_config_for(comfy, sd):
    """The SD15 model config at the tiny UNet's detected config (comfy.model_detection's
    detect_unet_config; SD15's matches() checks the full-size widths, so the class is named)."""
    import comfy.model_detection
    import comfy.supported_models
    unet_config = comfy.model_detection.detect_unet_config(sd, PREFIX_UNET)
    return comfy.supported_models.SD15(unet_config)


def build_unet(comfy, sd, unet_dtype, f8):
    """The UNet part of load_diffusion_model_state_dict (UNETLoader, unet_dtype from its
    weight_dtype) or of load_state_dict_guess_config (CheckpointLoaderSimple, unet_dtype from
    model_management.unet_dtype, which reads --fp8_e4m3fn-unet): manual_cast_dtype from
    unet_manual_cast, set_inference_dtype, get_model, load_model_weights, ModelPatcher."""
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.utils
    model_config = model_config_for(comfy, sd)
    if unet_dtype is None:
        params = comfy.utils.calculate_parameters(sd, PREFIX_UNET)
        unet_dtype = mm.unet_dtype(model_params=params,
                                   supported_dtypes=list(model_config.supported_inference_dtypes),
                                   weight_dtype=comfy.utils.weight_dtype(sd, PREFIX_UNET))
    assert unet_dtype == torch.float8_e4m3fn, unet_dtype
    device = mm.get_torch_device()
    manual_cast = mm.unet_manual_cast(unet_dtype, device, model_config.supported_inference_dtypes)
    assert manual_cast == torch.float32, (manual_cast, unet_dtype, device, model_config.supported_inference_dtypes)
    model_config.set_inference_dtype(unet_dtype, manual_cast)
    model = model_config.get_model(sd, PREFIX_UNET, device="cpu")
    model.load_model_weights(dict(sd), PREFIX_UNET)
    f8.after_load(model.diffusion_model, {k[len(PREFIX_UNET):]: v for k, v in sd.items()
                                          if k.startswith(PREFIX_UNET)})
    return comfy.model_patcher.ModelPatcher(model, load_device=device,
                                            offload_device=mm.unet_offload_device())


class _NoTokenizer:
    """Dry run only (--tokens-from): CLIP() builds its tokenizer, which needs transformers."""

    def __init__(self, *a, **k):
        pass


def build_clip(comfy, sd, tokens_from, f8):
    """CheckpointLoaderSimple's text encoder (load_state_dict_guess_config): comfy.sd.CLIP on
    SD15's clip_target with the tiny CLIP-L config as te_model_options (SDClipModel applies
    `clip_l_model_config` over its JSON config), dtype from text_encoder_dtype (which reads
    --fp8_e4m3fn-text-enc), then load_sd of process_clip_state_dict."""
    import comfy.sd
    import comfy.utils
    model_config = model_config_for(comfy, sd)
    target = model_config.clip_target(state_dict=sd)
    if tokens_from is not None:
        target.tokenizer = _NoTokenizer
    clip_sd = model_config.process_clip_state_dict(dict(sd))
    clip = comfy.sd.CLIP(target, embedding_directory=None, tokenizer_data=clip_sd,
                         parameters=comfy.utils.calculate_parameters(clip_sd),
                         model_options={"clip_l_model_config": dict(CLIP_CONFIG)})
    missing, unexpected = clip.load_sd(clip_sd, full_model=True)
    assert all(k.endswith("position_ids") for k in unexpected), unexpected  # ComfyUI logs them
    assert all(".logit_scale" in k or "text_projection" in k for k in missing), missing
    f8.after_load(clip.cond_stage_model, clip_sd)
    return clip


def build_vae(comfy, sd):
    """CheckpointLoaderSimple's VAE: comfy.sd.VAE on the `first_stage_model.` tensors, with the
    tiny AutoencoderKL config given (its default config is the full-size one)."""
    import comfy.sd
    import comfy.utils
    model_config = model_config_for(comfy, sd)
    vae_sd = comfy.utils.state_dict_prefix_replace(
        dict(sd), {k: "" for k in model_config.vae_key_prefix}, filter_keys=True)
    vae_sd = model_config.process_vae_state_dict(vae_sd)
    vae = comfy.sd.VAE(sd=vae_sd, config={"params": {"ddconfig": VAE_DDCONFIG, "embed_dim": 4}})
    missing, unexpected = vae.first_stage_model.load_state_dict(vae_sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return vae


# ---------------------------------------------------------------- the workflow's nodes

def tokenize(clip, text, tokens_from):
    if tokens_from is None:
        return clip.tokenize(text)
    p = next(p for p in tokens_from["prompts"] if p["text"] == text)["sd1_and_sdxl_clip_l"]
    return {"l": [[(int(i), float(w)) for i, w in zip(ids, ws)]
                  for ids, ws in zip(p["ids"], p["weights"])]}


def clip_text_encode(clip, text, tokens_from, prefix, g):
    """CLIPTextEncode: clip.tokenize, then clip.encode_from_tokens_scheduled."""
    tokens = tokenize(clip, text, tokens_from)
    cond = clip.encode_from_tokens_scheduled(tokens)
    for k, seqs in tokens.items():
        g[f"{prefix}.tokens.{k}.ids"] = np.array([[int(p[0]) for p in s] for s in seqs], np.int64)
        g[f"{prefix}.tokens.{k}.weights"] = np.array([[float(p[1]) for p in s] for s in seqs],
                                                     np.float32)
    g[f"{prefix}.cond"] = f32(cond[0][0])
    g[f"{prefix}.pooled"] = f32(cond[0][1]["pooled_output"])
    return cond


def ksampler(model, positive, negative, case, g):
    """EmptyLatentImage, then KSampler (nodes.common_ksampler): fix_empty_latent_channels,
    prepare_noise(seed), comfy.sample.sample with euler / normal / denoise 1 and a callback
    recording each step (x before the step, the model's x0)."""
    import comfy.sample
    import comfy.samplers
    latent = torch.zeros([1, 4, HEIGHT // 8, WIDTH // 8])
    latent = comfy.sample.fix_empty_latent_channels(model, latent)
    noise = comfy.sample.prepare_noise(latent, SEED, None)
    sigmas = comfy.samplers.calculate_sigmas(model.get_model_object("model_sampling"), "normal",
                                             STEPS)
    samples, xs, x0s = sample_recording_steps(model, noise, STEPS, CFG, "euler", "normal",
                                              positive, negative, latent, SEED)
    n = case["name"]
    g.update({f"{n}.noise": f32(noise), f"{n}.sigmas": f32(sigmas),
              f"{n}.steps.x": f32(xs), f"{n}.steps.denoised": f32(x0s),
              f"{n}.latent": f32(samples)})
    return samples


def decode_and_save(vae, samples, case, out_dir, g):
    """VAEDecode (comfy.sd.VAE.decode: NHWC in [0, 1]) and SaveImage's conversion,
    clip(255 * x, 0, 255) as uint8, written as an 8-bit RGB PNG without metadata."""
    image = vae.decode(samples)
    png = np.clip(255.0 * image[0].numpy(), 0, 255).astype(np.uint8)
    name = f"fp8_e2e_{case['name']}_0.png"
    save_png(os.path.join(out_dir, name), png)
    g.update({f"{case['name']}.image": f32(image), f"{case['name']}.png": png[None]})
    print(f"{case['name']}: latent mean {float(samples.mean()):.4g} std "
          f"{float(samples.std()):.4g}, png mean {float(png.mean()):.4g}")
    return name


def f32(t):
    return t.detach().float().contiguous().numpy()


def api_workflow(case):
    """The case as a ComfyUI API workflow; `flags` runs it under the case's command-line args."""
    model = ["9", 0] if case["unet_loader"] else ["1", 0]
    wf = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CKPT_NAME}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": case["pos"], "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": case["neg"], "clip": ["1", 1]}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": WIDTH, "height": HEIGHT,
                                                           "batch_size": 1}},
        "5": {"class_type": "KSampler", "inputs": {
            "seed": SEED, "steps": STEPS, "cfg": CFG, "sampler_name": "euler",
            "scheduler": "normal", "denoise": 1.0, "model": model, "positive": ["2", 0],
            "negative": ["3", 0], "latent_image": ["4", 0]}},
        "6": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": ["1", 2]}},
        "7": {"class_type": "SaveImage", "inputs": {"filename_prefix": f"fp8_e2e_{case['name']}",
                                                    "images": ["6", 0]}},
    }
    if case["unet_loader"]:
        wf["9"] = {"class_type": "UNETLoader", "inputs": {"unet_name": CKPT_NAME,
                                                          "weight_dtype": "fp8_e4m3fn"}}
    return wf


def set_flags(flags):
    """ComfyUI's own parser reads the case's flags; their fp8 settings go into
    comfy.cli_args.args, which model_management consults at each call (unet_dtype,
    text_encoder_dtype). The rest of args stays as parsed at import (cli_args post-processes
    some of it, e.g. `fast`)."""
    import comfy.cli_args
    parsed = comfy.cli_args.parser.parse_args(["--cpu", *flags])
    for k in ("fp8_e4m3fn_unet", "fp8_e4m3fn_text_enc"):
        setattr(comfy.cli_args.args, k, getattr(parsed, k))


def run_case(comfy, case, sd, tokens_from, f8, out_dir, g):
    set_flags(case["args"])
    # UNETLoader passes its weight_dtype as the dtype; the checkpoint loader asks unet_dtype.
    model = build_unet(comfy, sd, torch.float8_e4m3fn if case["unet_loader"] else None, f8)
    clip = build_clip(comfy, sd, tokens_from, f8)
    te_dtype = {n: p.dtype for n, p in clip.cond_stage_model.named_parameters()
                if n.endswith("token_embedding.weight")}
    # Without the flag, text_encoder_dtype keeps CPU text encoders in float16: the file's own
    # values (exact), computed in float32 by manual_cast as the fp8 ones are.
    want_te = torch.float8_e4m3fn if "--fp8_e4m3fn-text-enc" in case["args"] else torch.float16
    assert list(te_dtype.values()) == [want_te], (te_dtype, want_te)
    vae = build_vae(comfy, sd)
    n = case["name"]
    positive = clip_text_encode(clip, case["pos"], tokens_from, f"{n}.positive", g)
    negative = clip_text_encode(clip, case["neg"], tokens_from, f"{n}.negative", g)
    samples = ksampler(model, positive, negative, case, g)
    png = decode_and_save(vae, samples, case, out_dir, g)
    del model  # ModelPatcher's __del__ needs ComfyUI's modules, gone at interpreter exit
    return {"name": n, "args": case["args"], "pngs": [png], "workflow": api_workflow(case)}


def run(args):
    shimmed = import_comfy(os.path.abspath(args.comfy))
    import comfy
    f8 = Float8StandIn()
    f8.check()
    baddbmm_shimmed = baddbmm_shim()
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)  # as the SD e2e goldens: one thread, one summation order
    out_dir = args.out or HERE
    os.makedirs(out_dir, exist_ok=True)
    sd = load_safetensors(CHECKPOINT)
    tokens_from = json.load(open(args.tokens_from)) if args.tokens_from else None
    g, cases = {}, []
    for case in CASES:
        cases.append(run_case(comfy, case, sd, tokens_from, f8, out_dir, g))
    with open(os.path.join(out_dir, "fp8-e2e-cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    shims = shimmed() + baddbmm_shimmed
    if f8.active:
        shims += ",torch.float8_e4m3fn (bfloat16 stand-in, RNE e4m3fn values set after load)"
    meta = {"comfyui": "a125cd84", "torch": torch.__version__, "checkpoint": CKPT_NAME,
            "seed": str(SEED), "steps": str(STEPS), "cfg": str(CFG), "width": str(WIDTH),
            "height": str(HEIGHT), "sampler": "euler", "scheduler": "normal",
            "shimmed": shims, "tokens": ("tokens-from " + os.path.basename(args.tokens_from))
            if args.tokens_from else "ComfyUI SD1Tokenizer"}
    save_safetensors(os.path.join(out_dir, "fp8-e2e-golden.safetensors"), g, meta)
    print("shimmed:", shims)


def list_comfy_files(comfy_dir, path):
    """Every ComfyUI source module imported and the CLIP config / tokenizer files, relative to
    COMFYUI_DIR (the archive of scripts/device/fp8-e2e.sh prepare)."""
    files = {os.path.relpath(m.__file__, comfy_dir) for m in list(sys.modules.values())
             if getattr(m, "__file__", None) and os.path.abspath(m.__file__).startswith(comfy_dir + os.sep)}
    files.add("comfy/sd1_clip_config.json")
    d = "comfy/sd1_tokenizer"
    if os.path.isdir(os.path.join(comfy_dir, d)):
        files.update(os.path.join(d, f) for f in os.listdir(os.path.join(comfy_dir, d)))
    with open(path, "w") as f:
        f.write("\n".join(sorted(files)) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--comfy", required=True)
    p.add_argument("--out")
    p.add_argument("--tokens-from")
    p.add_argument("--list-comfy-files", help="write the ComfyUI files this run read")
    args = p.parse_args()
    run(args)
    if args.list_comfy_files:
        list_comfy_files(os.path.abspath(args.comfy), args.list_comfy_files)


if __name__ == "__main__":
    main()
