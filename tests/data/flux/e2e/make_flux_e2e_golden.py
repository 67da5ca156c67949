#!/usr/bin/env python3
"""End-to-end Flux reference (issue 39 item 5): a tiny single-file Flux checkpoint with random
weights, and ComfyUI's own code (commit a125cd84) running the workflow of
flux-e2e-workflow.json on it, stage by stage, on the CPU in float32.

Usage: make_flux_e2e_golden.py --comfy COMFYUI_DIR [--out DIR] [--tokens-from FILE]
       make_flux_e2e_golden.py --checkpoint-from-golden GOLDEN OUT
  COMFYUI_DIR: ComfyUI a125cd84's files (comfy/, comfy_extras/, node_helpers.py, the CLIP vocab
  in comfy/sd1_tokenizer and T5's tokenizer in comfy/text_encoders/t5_tokenizer).
  --out: where tiny-flux.safetensors, flux-e2e-golden.safetensors, flux_e2e_0.png and
  flux-e2e-workflow.json go (default: beside this script).
  --tokens-from: a JSON file, {prompt text: {"l": [[[id, weight], ...]], "t5xxl": [[...]]}},
  used INSTEAD of ComfyUI's tokenizers for both prompts. Only for
  a dry run on a machine without transformers/tokenizers; the golden comes from the real
  tokenizers (the script records which in the golden's metadata, "tokens").
  --checkpoint-from-golden: writes the checkpoint again from flux-e2e-golden.safetensors's
  metadata (its header and Note [reproducible tiny weights]) and checks the sha256, without
  ComfyUI.

Packages absent here (safetensors, transformers, einops, torchsde, ... on an old torch) are
stubbed or shimmed so that ComfyUI's modules import; on the GPU machine (torch 2.x, transformers,
tokenizers, einops present) nothing is shimmed and only torchsde, which ComfyUI imports and this
workflow never calls, is stubbed (the golden's metadata lists what was); the stubs and shims are
in ../../comfy_harness.py. Safetensors and the PNG are read and written by the few lines there
(numpy, zlib), in both cases.
"""

import argparse
import ast
import hashlib
import json
import os
import struct
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # tests/data: comfy_harness
from comfy_harness import (  # noqa: E402
    import_comfy, load_safetensors, sample_recording_steps, save_png, save_safetensors)

PROMPT = "a photo of a (red:1.2) fox in the snow"
NEGATIVE = ""
SEED = 42
STEPS = 4
CFG = 1.0
GUIDANCE = 3.5
WIDTH = HEIGHT = 64
MAX_SHIFT, BASE_SHIFT = 1.15, 0.5
WEIGHT_SEED = 3939

# Tiny configurations. Vocab-sized tables keep their real row counts (the real tokenizers'
# ids index them), so the widths are tiny. ComfyUI's detection fixes Flux's heads and RoPE axes
# for the 3072-wide model; the tiny DiT's are set here (heads 2, head dim 8, axes 2/2/4).
CLIP_CONFIG = {"hidden_size": 4, "intermediate_size": 8, "num_attention_heads": 2,
               "num_hidden_layers": 2, "projection_dim": 4}
T5_CONFIG = {"d_model": 4, "d_kv": 4, "num_heads": 2, "d_ff": 8, "num_layers": 2}
DIT_CONFIG = {"hidden_size": 16, "num_heads": 2, "axes_dim": [2, 2, 4], "mlp_ratio": 4.0,
              "depth": 1, "depth_single_blocks": 1, "context_in_dim": 4, "vec_in_dim": 4}
VAE_CONFIG = {"double_z": True, "z_channels": 16, "resolution": 256, "in_channels": 3,
              "out_ch": 3, "ch": 32, "ch_mult": [1, 1], "num_res_blocks": 1,
              "attn_resolutions": [], "dropout": 0.0}
PREFIX_DIT = "model.diffusion_model."
PREFIX_VAE = "vae."
PREFIX_CLIP_L = "text_encoders.clip_l.transformer."
PREFIX_T5 = "text_encoders.t5xxl.transformer."
MAX_CHECKPOINT_BYTES = 1200 * 1000


# ---------------------------------------------------------------- the tiny checkpoint

def build_modules(comfy):
    """ComfyUI's own classes at the tiny configs: the DiT (comfy.model_base.Flux), the two text
    encoders (comfy/text_encoders/flux.py FluxClipModel) and the autoencoder (comfy.sd.VAE's
    AutoencodingEngine for a VAE without quant convs, as Flux's ae.safetensors)."""
    import comfy.supported_models
    import comfy.text_encoders.flux
    from comfy.ldm.models.autoencoder import AutoencodingEngine
    unet_config = {"image_model": "flux", "in_channels": 16, "patch_size": 2, "out_channels": 16,
                   "theta": 10000, "qkv_bias": True, "guidance_embed": True, **DIT_CONFIG}
    model_config = comfy.supported_models.Flux(unet_config)
    model_config.set_inference_dtype(torch.float32, None)
    dit = model_config.get_model({}, PREFIX_DIT, device="cpu")
    options = {"clip_l_model_config": dict(CLIP_CONFIG), "t5xxl_model_config": dict(T5_CONFIG)}
    clip = comfy.text_encoders.flux.flux_clip(dtype_t5=torch.float32)(
        device="cpu", dtype=torch.float32, model_options=options)
    vae = AutoencodingEngine(
        regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
        encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": VAE_CONFIG},
        decoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": VAE_CONFIG})
    return model_config, dit, clip, vae.eval()


# Note [reproducible tiny weights]: every weight is m * 2^e (or 1 + m' * 2^-10) for an integer m
# drawn by splitmix64 from the tensor's full key, so it is exact in f16 and f32 and any language
# can write the same file again from its header (stored in the golden's metadata) without torch.
MASK = (1 << 64) - 1


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def splitmix_ints(key, n):
    """m in [-1024, 1023] for elements 0..n-1: state = fnv1a64(key) ^ seed, then per element
    state += 0x9E3779B97F4A7C15, z = splitmix64's finaliser of state, m = (z >> 53) - 1024."""
    with np.errstate(over="ignore"):
        state = np.uint64(fnv1a64(key) ^ WEIGHT_SEED)
        z = state + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(53)).astype(np.int64) - 1024


def weight_rule(key, shape):
    """(kind, exponent): norm scales 1 + (m >> 3) * 2^-10 in [0.875, 1.125); biases m * 2^-15
    (|v| < 1/32); embeddings (token, position, T5 shared, relative position bias) m * 2^-9
    (uniform on [-2, 2)); other matrices and convolutions m * 2^-(10 + k), k the largest integer
    with 3 * 4^k <= fan_in (fan_in = product of the dims after the first): uniform with a
    standard deviation within 2x of 1/sqrt(fan_in)."""
    if len(shape) == 1:
        return ("bias", -15) if key.endswith("bias") else ("scale", -10)
    if "embedding" in key or key.endswith("shared.weight") or "relative_attention_bias" in key:
        return "matrix", -9
    fan_in, k = int(np.prod(shape[1:])), 0
    while 3 * 4 ** (k + 1) <= fan_in:
        k += 1
    return "matrix", -(10 + k)


def random_value(key, shape):
    m = splitmix_ints(key, int(np.prod(shape))).reshape(shape)
    kind, e = weight_rule(key, shape)
    v = 1.0 + np.right_shift(m, 3) * 2.0 ** e if kind == "scale" else m * 2.0 ** e
    return torch.from_numpy(v.astype(np.float16))


def checkpoint_from_golden(golden_path, out_path):
    """Writes tiny-flux.safetensors from the golden's metadata alone (header text + the rule; no
    ComfyUI, no torch generator) and checks its sha256: what a test in any language can do."""
    with open(golden_path, "rb") as f:
        raw = f.read()
    meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
    header = meta["checkpoint_header"].encode()
    blobs = []
    for key, e in json.loads(header).items():
        if key != "__metadata__":
            blobs.append((e["data_offsets"][0], random_value(key, tuple(e["shape"])).numpy().tobytes()))
    data = struct.pack("<Q", len(header)) + header + b"".join(b for _, b in sorted(blobs))
    with open(out_path, "wb") as f:
        f.write(data)
    ok = hashlib.sha256(data).hexdigest() == meta["checkpoint_sha256"]
    print(f"{out_path}: {len(data)} bytes, sha256 {'matches' if ok else 'DIFFERS from'} the golden's")
    return ok


def tiny_checkpoint(dit, clip, vae):
    """The file's tensors: the names and shapes of ComfyUI's modules under the single-file
    prefixes, values by Note [reproducible tiny weights]."""
    parts = [(PREFIX_DIT, dit.diffusion_model.state_dict()),
             (PREFIX_CLIP_L, clip.clip_l.transformer.state_dict()),
             (PREFIX_T5, clip.t5xxl.transformer.state_dict()),
             (PREFIX_VAE, vae.state_dict())]
    sd = {}
    for prefix, part in parts:
        for k in sorted(part):
            sd[prefix + k] = random_value(prefix + k, tuple(part[k].shape))
    return sd


def load_like_checkpoint_loader(comfy, model_config, dit, clip, vae, sd):
    """What CheckpointLoaderSimple does with the file's tensors (comfy/sd.py
    load_checkpoint_guess_config): the DiT's weights through BaseModel.load_model_weights, the
    text encoders' through process_clip_state_dict + load_state_dict(strict=False), the VAE's
    through its prefix filter and process_vae_state_dict. Every tensor must land: nothing missing, nothing unused."""
    dit.load_model_weights(dict(sd), PREFIX_DIT)
    check_loaded("dit", dit.diffusion_model, {k[len(PREFIX_DIT):] for k in sd if k.startswith(PREFIX_DIT)})
    clip_sd = model_config.process_clip_state_dict(dict(sd))
    missing, unexpected = clip.load_state_dict(clip_sd, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"clip_l.logit_scale", "t5xxl.logit_scale"}, missing
    import comfy.utils
    vae_sd = comfy.utils.state_dict_prefix_replace(
        dict(sd), {k: "" for k in model_config.vae_key_prefix}, filter_keys=True)
    vae_sd = model_config.process_vae_state_dict(vae_sd)
    missing, unexpected = vae.load_state_dict(vae_sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)


def check_loaded(what, module, keys):
    own = set(module.state_dict())
    assert own == keys, (what, sorted(own ^ keys)[:10])


# ---------------------------------------------------------------- the workflow's nodes

def tokenize(comfy, text, tokens_from):
    if tokens_from is not None:
        pairs = tokens_from[text]
        return {k: [[tuple(p) for p in seq] for seq in v] for k, v in pairs.items()}
    import comfy.text_encoders.flux
    return comfy.text_encoders.flux.FluxTokenizer().tokenize_with_weights(text)


def clip_text_encode(clip, tokens):
    """CLIPTextEncode: CLIP.encode_from_tokens_scheduled without hooks = encode_token_weights,
    conditioning [[cond, {"pooled_output": pooled}]]."""
    clip.reset_clip_options()
    cond, pooled = clip.encode_token_weights(tokens)[:2]
    return [[cond, {"pooled_output": pooled}]]


def model_sampling_flux_node(comfy_dir):
    """The ModelSamplingFlux node class, taken out of comfy_extras/nodes_model_advanced.py with
    ast (the module imports ComfyUI's whole node set)."""
    import comfy.model_sampling
    path = os.path.join(comfy_dir, "comfy_extras", "nodes_model_advanced.py")
    tree = ast.parse(open(path).read())
    picked = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelSamplingFlux"]
    ns = {"comfy": sys.modules["comfy"], "torch": torch, "nodes": types.SimpleNamespace(MAX_RESOLUTION=16384)}
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    return ns["ModelSamplingFlux"]()


def api_workflow():
    """The same run as a ComfyUI API workflow (what a user queues; the checkpoint name is the file
    written here)."""
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny-flux.safetensors"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": PROMPT, "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": NEGATIVE, "clip": ["1", 1]}},
        "4": {"class_type": "FluxGuidance", "inputs": {"conditioning": ["2", 0], "guidance": GUIDANCE}},
        "5": {"class_type": "EmptySD3LatentImage", "inputs": {"width": WIDTH, "height": HEIGHT, "batch_size": 1}},
        "6": {"class_type": "ModelSamplingFlux", "inputs": {"model": ["1", 0], "max_shift": MAX_SHIFT,
              "base_shift": BASE_SHIFT, "width": WIDTH, "height": HEIGHT}},
        "7": {"class_type": "KSampler", "inputs": {"seed": SEED, "steps": STEPS, "cfg": CFG,
              "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0, "model": ["6", 0],
              "positive": ["4", 0], "negative": ["3", 0], "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["7", 0], "vae": ["1", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "flux_e2e", "images": ["8", 0]}},
    }


def tokens_tensors(prefix, tokens):
    out = {}
    for k, seqs in tokens.items():
        out[f"{prefix}.{k}.ids"] = np.array([[int(p[0]) for p in s] for s in seqs], dtype=np.int64)
        out[f"{prefix}.{k}.weights"] = np.array([[float(p[1]) for p in s] for s in seqs], dtype=np.float32)
    return out


def f32(t):
    return t.detach().float().contiguous().numpy()


def write_checkpoint(out_dir, sd):
    """tiny-flux.safetensors with the configs in its metadata; returns (header text, sha256)."""
    path = os.path.join(out_dir, "tiny-flux.safetensors")
    meta = {"comfyui": "a125cd84", "weight_seed": str(WEIGHT_SEED),
            "dit_config": json.dumps(DIT_CONFIG), "clip_l_config": json.dumps(CLIP_CONFIG),
            "t5xxl_config": json.dumps(T5_CONFIG), "vae_config": json.dumps(VAE_CONFIG)}
    save_safetensors(path, {k: v.numpy() for k, v in sd.items()}, meta)
    with open(path, "rb") as f:
        raw = f.read()
    print(f"{path}: {len(sd)} tensors, {len(raw)} bytes")
    assert len(raw) < MAX_CHECKPOINT_BYTES, len(raw)
    return raw[8:8 + struct.unpack("<Q", raw[:8])[0]].decode(), hashlib.sha256(raw).hexdigest()


def encode_prompts(comfy, clip, tokens_from, g):
    """CLIPTextEncode for both prompts, FluxGuidance on the positive; fills the golden g."""
    import node_helpers
    tok_pos = tokenize(comfy, PROMPT, tokens_from)
    tok_neg = tokenize(comfy, NEGATIVE, tokens_from)
    positive = clip_text_encode(clip, tok_pos)
    negative = clip_text_encode(clip, tok_neg)
    g.update({**tokens_tensors("tokens.positive", tok_pos), **tokens_tensors("tokens.negative", tok_neg),
              "cond.positive": f32(positive[0][0]), "pooled.positive": f32(positive[0][1]["pooled_output"]),
              "cond.negative": f32(negative[0][0]), "pooled.negative": f32(negative[0][1]["pooled_output"])})
    return node_helpers.conditioning_set_values(positive, {"guidance": GUIDANCE}), negative


def sample(comfy_dir, dit, positive, negative, g):
    """EmptySD3LatentImage, ModelSamplingFlux, then KSampler (nodes.common_ksampler: noise from
    the seed, comfy.sample.sample with euler / simple / denoise 1); fills g, returns the latent
    VAEDecode receives and the model sampling's shift."""
    import comfy.model_patcher
    import comfy.sample
    import comfy.samplers
    latent = torch.zeros([1, 16, HEIGHT // 8, WIDTH // 8])
    patcher = comfy.model_patcher.ModelPatcher(dit, load_device=torch.device("cpu"),
                                               offload_device=torch.device("cpu"))
    patched = model_sampling_flux_node(comfy_dir).patch(patcher, MAX_SHIFT, BASE_SHIFT, WIDTH, HEIGHT)[0]
    shift = float(patched.get_model_object("model_sampling").shift)
    sigmas = comfy.samplers.calculate_sigmas(patched.get_model_object("model_sampling"), "simple", STEPS)
    latent_image = comfy.sample.fix_empty_latent_channels(patched, latent)
    noise = comfy.sample.prepare_noise(latent_image, SEED, None)
    samples, steps_x, steps_denoised = sample_recording_steps(
        patched, noise, STEPS, CFG, "euler", "simple", positive, negative, latent_image, SEED)
    del patched, patcher  # their __del__ needs ComfyUI's modules, gone at interpreter exit
    g.update({"sigmas": f32(sigmas), "noise": f32(noise), "steps.x": f32(steps_x),
              "steps.denoised": f32(steps_denoised), "latent": f32(samples)})
    print("shift", shift, "sigmas", sigmas.tolist())
    return samples, shift


def decode_and_save_image(vae, samples, out_dir, g):
    """VAEDecode (comfy.sd.VAE.decode: clamp((decode + 1) / 2, 0, 1), channels last), then
    SaveImage's conversion, clip(255 * x, 0, 255) as uint8, as flux_e2e_0.png."""
    image = torch.clamp((vae.decode(samples.float()).float() + 1.0) / 2.0, min=0.0, max=1.0)
    image = image.movedim(1, -1)
    png = np.clip(255.0 * image[0].numpy(), 0, 255).astype(np.uint8)
    save_png(os.path.join(out_dir, "flux_e2e_0.png"), png)
    g.update({"image": f32(image), "png": png[None]})
    print("latent mean/std", float(samples.mean()), float(samples.std()),
          "png mean", float(png.mean()), "shape", png.shape)


def run(args):
    shimmed = import_comfy(os.path.abspath(args.comfy))
    import comfy
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)  # as the SD e2e goldens: one thread, one summation order
    out_dir = args.out or HERE
    os.makedirs(out_dir, exist_ok=True)
    model_config, dit, clip, vae = build_modules(comfy)
    ckpt_header, ckpt_sha256 = write_checkpoint(out_dir, tiny_checkpoint(dit, clip, vae))
    sd = load_safetensors(os.path.join(out_dir, "tiny-flux.safetensors"))
    load_like_checkpoint_loader(comfy, model_config, dit, clip, vae, sd)
    with open(os.path.join(out_dir, "flux-e2e-workflow.json"), "w") as f:
        json.dump(api_workflow(), f, indent=1)
        f.write("\n")

    g = {}
    tokens_from = json.load(open(args.tokens_from)) if args.tokens_from else None
    positive, negative = encode_prompts(comfy, clip, tokens_from, g)
    samples, shift = sample(args.comfy, dit, positive, negative, g)
    decode_and_save_image(vae, samples, out_dir, g)
    meta = {"comfyui": "a125cd84", "torch": torch.__version__, "prompt": PROMPT,
            "negative": NEGATIVE, "seed": str(SEED), "steps": str(STEPS), "cfg": str(CFG),
            "guidance": str(GUIDANCE), "width": str(WIDTH), "height": str(HEIGHT),
            "shift": repr(shift), "shimmed": shimmed(),
            "tokens": ("tokens-from " + os.path.basename(args.tokens_from)) if args.tokens_from
            else "ComfyUI FluxTokenizer",
            "checkpoint_header": ckpt_header, "checkpoint_sha256": ckpt_sha256}
    save_safetensors(os.path.join(out_dir, "flux-e2e-golden.safetensors"), g, meta)
    print("pooled", g["pooled.positive"].flatten().tolist(), "shimmed:", meta["shimmed"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--comfy")
    p.add_argument("--checkpoint-from-golden", nargs=2, metavar=("GOLDEN", "OUT"),
                   help="only write tiny-flux.safetensors from the golden's metadata and check it")
    p.add_argument("--out")
    p.add_argument("--tokens-from")
    p.add_argument("--list-comfy-files", help="write the ComfyUI files this run read (for the "
                   "archive of scripts/device/flux-e2e.sh prepare)")
    args = p.parse_args()
    if args.checkpoint_from_golden:
        sys.exit(0 if checkpoint_from_golden(*args.checkpoint_from_golden) else 1)
    if not args.comfy:
        p.error("--comfy is required")
    run(args)
    if args.list_comfy_files:
        list_comfy_files(os.path.abspath(args.comfy), args.list_comfy_files)


def list_comfy_files(comfy_dir, path):
    """Every ComfyUI source module imported, the node file read with ast, the text encoders' JSON
    configs (the tiny ones override their keys) and the tokenizers' data, relative to
    COMFYUI_DIR."""
    files = {os.path.relpath(m.__file__, comfy_dir) for m in list(sys.modules.values())
             if getattr(m, "__file__", None) and os.path.abspath(m.__file__).startswith(comfy_dir + os.sep)}
    files.update({"comfy_extras/nodes_model_advanced.py", "comfy/sd1_clip_config.json",
                  "comfy/text_encoders/t5_config_xxl.json"})
    for d in ("comfy/sd1_tokenizer", "comfy/text_encoders/t5_tokenizer"):
        files.update(os.path.join(d, f) for f in os.listdir(os.path.join(comfy_dir, d)))
    with open(path, "w") as f:
        f.write("\n".join(sorted(files)) + "\n")


if __name__ == "__main__":
    main()
