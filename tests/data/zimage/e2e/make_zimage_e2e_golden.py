#!/usr/bin/env python3
"""End-to-end Z-Image reference (issue 40 item 4): a tiny Z-Image model set with random weights
(the DiT in ComfyUI's layout, Qwen3 in ComfyUI's qwen_3_4b layout, Flux's autoencoder) and a
PyTorch run of ComfyUI's Z-Image Turbo workflow on it (zimage-e2e-workflow.json: UNETLoader,
CLIPLoader lumina2, VAELoader, CLIPTextEncode, ConditioningZeroOut, EmptySD3LatentImage,
ModelSamplingAuraFlow, KSampler res_multistep / simple, VAEDecode, SaveImage), every stage kept,
on the CPU in float32. See README.md beside this file.

Usage: make_zimage_e2e_golden.py --comfy COMFYUI_DIR [--diffusers DIR] [--out DIR]
                                 [--models DIR] [--local-standins]
       make_zimage_e2e_golden.py --models-from-golden GOLDEN MODELS_DIR
  COMFYUI_DIR: ComfyUI a125cd84's files (comfy/, comfy_extras/, nodes.py, node_helpers.py), as
  scripts/device.sh flux-e2e:prepare archives them.
  --diffusers: a diffusers checkout (default bench/peers/diffusers, else
  /work/shared/peers/diffusers): only its transformer_z_image.py is loaded
  (../make_dit_golden.py's loader).
  --out: where zimage-e2e-golden.safetensors, zimage_e2e_0.png and zimage-e2e-workflow.json go
  (default: beside this script).
  --models: where the three model files go, in ComfyUI's folders (default: a temp dir).
  --local-standins: ONLY for a dry run without transformers/tokenizers (the development
  machine): the token ids come from ../../qwen/tokenizer_ids.json (transformers' ids for this
  prompt, made on the GPU machine) and Qwen3 is ComfyUI's own Llama2_ (comfy/text_encoders/
  llama.py, as ../../qwen/make_llm_golden.py builds it) instead of transformers' Qwen3Model. The
  golden's metadata then says "standins" and it must not be committed.
  --models-from-golden: writes the three model files again from the golden's metadata (their
  headers and Note [reproducible tiny weights] of ../../flux/e2e/make_flux_e2e_golden.py) and
  checks their sha256, without ComfyUI or torch's generators.

The reference for each stage (README.md says why each is the one ComfyUI runs):
  tokens       transformers' Qwen2Tokenizer (data/qwen_tokenizer) on the chat template's text
  Qwen3        transformers' Qwen3Model, output_hidden_states=True, hidden_states[-2]
  DiT          diffusers' ZImageTransformer2DModel in ComfyUI's NextDiT call (t = 1 - sigma,
               output negated) inside ComfyUI's own model_base.Lumina2 / ModelPatcher
  sampling     ComfyUI's comfy.sample.sample (KSampler: prepare_noise, cfg-1 skip of the
               negative, Flux latent format, res_multistep, simple scheduler) after its
               ModelSamplingAuraFlow node's patch_aura(3)
  VAE          ComfyUI's AutoencodingEngine (the Flux VAE's Encoder/Decoder), VAEDecode's
               clamp((x + 1) / 2), SaveImage's uint8 conversion
"""

import argparse
import ast
import hashlib
import json
import os
import struct
import sys
import tempfile
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(os.path.dirname(HERE))  # tests/data
REPO = os.path.dirname(os.path.dirname(DATA))
sys.path.insert(0, DATA)
sys.path.insert(0, os.path.join(DATA, "flux", "e2e"))
sys.path.insert(0, os.path.join(DATA, "zimage"))
sys.path.insert(0, os.path.join(DATA, "qwen"))
from comfy_harness import (  # noqa: E402
    import_comfy, load_safetensors, sample_recording_steps, save_png, save_safetensors)
import make_flux_e2e_golden as flux_e2e  # noqa: E402  (Note [reproducible tiny weights])

PROMPT = "A photograph of a red fox in a snowy forest, golden hour lighting, 85mm lens."
SEED = 42
STEPS = 8
CFG = 1.0
SHIFT = 3.0
SAMPLER = "res_multistep"
SCHEDULER = "simple"
WIDTH, HEIGHT = 96, 64  # latent 12 x 8: 6 x 4 image tokens (not square: rows and columns differ)

# Tiny configurations, as `headroom make-model --arch zimage --size tiny` shapes them (Note [tiny
# z-image] in src/models/zimage/zimage_make_model.cpp; the numbers are restated here, nothing of
# headroom runs). Qwen3 keeps the real 151,936-row vocabulary (the template's ids are above
# 151,000); the DiT keeps Z-Image's head width 128 so that its RoPE axes 32/48/48 fit.
LLM_CONFIG = {"vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "head_dim": 16, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 40960}
DIT_CONFIG = {"all_patch_size": [2], "all_f_patch_size": [1], "in_channels": 16, "dim": 256,
              "n_layers": 1, "n_refiner_layers": 1, "n_heads": 2, "n_kv_heads": 2,
              "norm_eps": 1e-5, "qk_norm": True, "cap_feat_dim": 32, "rope_theta": 256.0,
              "t_scale": 1000.0, "axes_dims": [32, 48, 48], "axes_lens": [1024, 512, 512]}
DIT_T_MID = 64  # t_embedder.mlp.0's width (diffusers fixes 1024 for the full model)
VAE_CONFIG = {"double_z": True, "z_channels": 16, "resolution": 256, "in_channels": 3,
              "out_ch": 3, "ch": 32, "ch_mult": [1, 2, 2, 2], "num_res_blocks": 2,
              "attn_resolutions": [], "dropout": 0.0}
# The model files, under a ComfyUI models folder (the names the workflow's loaders take).
FILES = {"dit": "diffusion_models/tiny-zimage.safetensors",
         "te": "text_encoders/tiny-qwen3.safetensors",
         "vae": "vae/tiny-flux-ae.safetensors"}
GOLDEN = "zimage-e2e-golden.safetensors"
# Cross-checks that failed (the references disagree with each other): printed, exit status 3
# after every file is written, so the run shows what to look at before anything is committed.
DISAGREEMENTS = []
PNG = "zimage_e2e_0.png"
WORKFLOW = "zimage-e2e-workflow.json"


def chat_template(prompt):
    """ComfyUI's ZImageTokenizer llama_template (and diffusers' ZImagePipeline's
    apply_chat_template with enable_thinking): the text the tokenizer reads."""
    return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------- the tiny model files

def checksum64(data):
    """sum over j of w_j * (2 j + 1) mod 2^64, w_j the file's little-endian 64-bit words (the last
    one zero-padded): the C++ test's check that it wrote the same file (sha256 is for python)."""
    pad = (-len(data)) % 8
    w = np.frombuffer(data + b"\0" * pad, dtype="<u8")
    with np.errstate(over="ignore"):
        return int(np.sum(w * (2 * np.arange(len(w), dtype=np.uint64) + np.uint64(1)), dtype=np.uint64))


def rule_state_dict(shapes):
    """{key: f16 tensor} for {key: shape}: Note [reproducible tiny weights], keyed by the name in
    the file."""
    return {k: flux_e2e.random_value(k, tuple(s)) for k, s in sorted(shapes.items())}


def write_model_file(path, sd, meta):
    """Writes one model file; returns (header text, sha256, checksum64) for the golden's metadata."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_safetensors(path, {k: v.numpy() for k, v in sd.items()}, meta)
    with open(path, "rb") as f:
        raw = f.read()
    print(f"{path}: {len(sd)} tensors, {len(raw)} bytes")
    header = raw[8:8 + struct.unpack("<Q", raw[:8])[0]].decode()
    return header, hashlib.sha256(raw).hexdigest(), "%016x" % checksum64(raw)


def models_from_golden(golden_path, models_dir):
    """The three files again from the golden's metadata alone, each checked against its sha256."""
    with open(golden_path, "rb") as f:
        raw = f.read()
    meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
    ok = True
    for part, rel in FILES.items():
        header = meta[f"{part}.header"].encode()
        blobs = []
        for key, e in json.loads(header).items():
            if key != "__metadata__":
                v = flux_e2e.random_value(key, tuple(e["shape"])).numpy().tobytes()
                blobs.append((e["data_offsets"][0], v))
        data = struct.pack("<Q", len(header)) + header + b"".join(b for _, b in sorted(blobs))
        path = os.path.join(models_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        same = hashlib.sha256(data).hexdigest() == meta[f"{part}.sha256"]
        ok = ok and same
        print(f"{path}: {len(data)} bytes, sha256 {'matches' if same else 'DIFFERS from'} the golden's")
    return ok


# ---------------------------------------------------------------- the DiT (diffusers)

def build_dit(diffusers_dir):
    """diffusers' ZImageTransformer2DModel at the tiny config (../make_dit_golden.py's loader:
    the model file with its package imports replaced), t_embedder's hidden width DIT_T_MID."""
    import make_dit_golden
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    zi = make_dit_golden.load_model_module(diffusers_dir)
    cfg = dict(DIT_CONFIG, all_patch_size=tuple(DIT_CONFIG["all_patch_size"]),
               all_f_patch_size=tuple(DIT_CONFIG["all_f_patch_size"]))
    model = zi.ZImageTransformer2DModel(**cfg)
    model.t_embedder = zi.TimestepEmbedder(min(cfg["dim"], zi.ADALN_EMBED_DIM), mid_size=DIT_T_MID)
    if sdpa is not None:  # the loader's stand-in was only for the processor's constructor check
        torch.nn.functional.scaled_dot_product_attention = sdpa
    return make_dit_golden, model.eval()


def diffusers_from_comfy(comfy_sd, model_keys):
    """ComfyUI's DiT names -> diffusers' (convert_z_image_transformer_checkpoint_to_diffusers:
    qkv split in row thirds, out -> to_out.0, q_norm/k_norm -> norm_q/norm_k, x_embedder and
    final_layer -> the all_* dicts)."""
    out = {}
    for k, v in comfy_sd.items():
        if k.endswith(".attention.qkv.weight"):
            base = k[: -len(".qkv.weight")]
            for name, part in zip(("to_q", "to_k", "to_v"), v.chunk(3, dim=0)):
                out[f"{base}.{name}.weight"] = part
            continue
        n = k.replace(".attention.out.", ".attention.to_out.0.")
        n = n.replace(".attention.q_norm.", ".attention.norm_q.")
        n = n.replace(".attention.k_norm.", ".attention.norm_k.")
        if n.startswith("x_embedder."):
            n = "all_x_embedder.2-1." + n[len("x_embedder."):]
        if n.startswith("final_layer."):
            n = "all_final_layer.2-1." + n[len("final_layer."):]
        out[n] = v
    assert set(out) == set(model_keys), sorted(set(out) ^ set(model_keys))[:10]
    return out


class ComfyNextDiTCall(torch.nn.Module):
    """ComfyUI's NextDiT.forward convention for Z-Image around diffusers' model:
    forward(x, timesteps, context, num_tokens, attention_mask) with t = 1 - timesteps (timesteps
    = sigma under ModelSamplingAuraFlow) and the prediction negated, so that CONST's
    denoised = x - sigma * out. One sample per call (batch 1 here)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def dtype(self):
        return torch.float32

    def forward(self, x, timesteps, context=None, num_tokens=None, attention_mask=None,
                control=None, transformer_options={}, **kwargs):
        assert attention_mask is None, "all caption tokens are real: Lumina2 passes no mask"
        assert num_tokens is None or int(num_tokens) == context.shape[1], (num_tokens, context.shape)
        out = self.model([xi.unsqueeze(1) for xi in x], 1.0 - timesteps, list(context),
                         return_dict=False)[0]
        return -torch.stack([o.squeeze(1) for o in out])


def comfy_diffusion_model(dit):
    """ComfyUI's Lumina2 model (model_base.Lumina2: FLOW model sampling, the Flux latent format,
    its extra_conds), built without its own network, with the diffusers DiT in its place; wrapped
    in a ModelPatcher as UNETLoader returns it."""
    import comfy.model_patcher
    import comfy.supported_models
    cfg = comfy.supported_models.Lumina2({"image_model": "lumina2",
                                          "disable_unet_model_creation": True})
    cfg.set_inference_dtype(torch.float32, None)
    model = cfg.get_model({}, "", device=torch.device("cpu"))
    model.diffusion_model = ComfyNextDiTCall(dit)
    return comfy.model_patcher.ModelPatcher(model, load_device=torch.device("cpu"),
                                            offload_device=torch.device("cpu"))


# ---------------------------------------------------------------- the text encoder

def tokenize(local):
    """The template's ids: transformers' Qwen2Tokenizer from data/qwen_tokenizer (ComfyUI's
    qwen25_tokenizer files), no special tokens added; --local-standins: the same ids as
    tests/data/qwen/tokenizer_ids.json recorded them from transformers. Returns (ids, source)."""
    text = chat_template(PROMPT)
    recorded = None
    with open(os.path.join(DATA, "qwen", "tokenizer_ids.json"), encoding="utf-8") as f:
        for case in json.load(f)["cases"]:
            if case["text"] == text:
                recorded = case["ids_config"]
    if local:
        assert recorded is not None, "the prompt is not in tokenizer_ids.json"
        return recorded, "tokenizer_ids.json (LOCAL STAND-IN)"
    import transformers
    folder = os.path.join(REPO, "data", "qwen_tokenizer")
    tok = None
    for cls in ("Qwen2Tokenizer", "Qwen2TokenizerFast"):
        if hasattr(transformers, cls):
            tok = getattr(transformers, cls).from_pretrained(folder, local_files_only=True)
            break
    if tok is None:
        sys.exit("transformers %s has no Qwen2Tokenizer" % transformers.__version__)
    ids = list(tok.encode(text, add_special_tokens=False))
    if recorded is not None and ids != recorded:
        DISAGREEMENTS.append("tokens differ from tests/data/qwen/tokenizer_ids.json's")
    return ids, f"transformers {transformers.__version__} {type(tok).__name__}"


def qwen3_transformers(sd):
    """transformers' Qwen3Model at LLM_CONFIG with the file's weights (eager attention)."""
    from transformers import Qwen3Config, Qwen3Model
    c = LLM_CONFIG
    config = Qwen3Config(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                         intermediate_size=c["intermediate_size"],
                         num_hidden_layers=c["num_hidden_layers"],
                         num_attention_heads=c["num_attention_heads"],
                         num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
                         rope_theta=c["rope_theta"], rms_norm_eps=c["rms_norm_eps"],
                         max_position_embeddings=c["max_position_embeddings"],
                         attention_bias=False, hidden_act="silu", tie_word_embeddings=True,
                         use_sliding_window=False)
    rp = getattr(config, "rope_parameters", None)  # transformers 5 keeps theta there
    if isinstance(rp, dict):
        rp["rope_theta"] = c["rope_theta"]
    config._attn_implementation = "eager"
    model = Qwen3Model(config).float().eval()
    model.load_state_dict({k[len("model."):]: v.float() for k, v in sd.items()}, strict=True)
    return lambda ids: model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[-2]


def qwen3_comfy(sd):
    """ComfyUI's own Llama2_ at the Qwen3 settings (make_llm_golden.comfy_model), called as
    SDClipModel(layer="hidden", layer_idx=-2) calls it: the local stand-in, and on the GPU
    machine a cross-check of transformers' result."""
    import make_llm_golden
    m = make_llm_golden.comfy_model(LLM_CONFIG)
    m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    m.eval()
    return lambda ids: m.model(ids, intermediate_output=-2, final_layer_norm_intermediate=False,
                               dtype=torch.float32)[1]


# ---------------------------------------------------------------- the VAE (ComfyUI)

def build_vae():
    """ComfyUI's AutoencodingEngine as comfy.sd.VAE builds it for a VAE without quant convs
    (Flux's ae.safetensors), at the tiny ddconfig."""
    from comfy.ldm.models.autoencoder import AutoencodingEngine
    vae = AutoencodingEngine(
        regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
        encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": VAE_CONFIG},
        decoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": VAE_CONFIG})
    return vae.eval()


# ---------------------------------------------------------------- the workflow's nodes

def node_class(comfy_dir, rel, name, ns):
    """A node class taken out of a ComfyUI file with ast (nodes.py and nodes_model_advanced.py
    import ComfyUI's whole node set)."""
    path = os.path.join(comfy_dir, rel)
    tree = ast.parse(open(path).read())
    picked = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert picked, (rel, name)
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    return ns[name]


def api_workflow(files):
    """The same run as a ComfyUI API workflow (examples/zimage_turbo_workflow.json at tiny size)."""
    name = {k: os.path.basename(v) for k, v in files.items()}
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": name["dit"], "weight_dtype": "default"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": name["te"], "type": "lumina2"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": name["vae"]}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": PROMPT, "clip": ["2", 0]}},
        "5": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["4", 0]}},
        "6": {"class_type": "EmptySD3LatentImage", "inputs": {"width": WIDTH, "height": HEIGHT, "batch_size": 1}},
        "7": {"class_type": "ModelSamplingAuraFlow", "inputs": {"shift": SHIFT, "model": ["1", 0]}},
        "8": {"class_type": "KSampler", "inputs": {"seed": SEED, "steps": STEPS, "cfg": CFG,
              "sampler_name": SAMPLER, "scheduler": SCHEDULER, "denoise": 1.0, "model": ["7", 0],
              "positive": ["4", 0], "negative": ["5", 0], "latent_image": ["6", 0]}},
        "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["3", 0]}},
        "10": {"class_type": "SaveImage", "inputs": {"filename_prefix": "zimage_e2e", "images": ["9", 0]}},
    }


def f32(t):
    return t.detach().float().contiguous().numpy()


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def encode_prompt(te_sd, local, g, meta):
    """CLIPTextEncode: the template's ids through Qwen3, hidden_states[-2] for every token: the
    conditioning [[cond, {"pooled_output": None, "attention_mask": ones}]] (Note [Z-Image text
    conditioning] in src/models/zimage/zimage_text_encoder.cpp); ConditioningZeroOut on it."""
    ids, meta["tokens"] = tokenize(local)
    x = torch.tensor([ids], dtype=torch.long)
    comfy_cond = qwen3_comfy(te_sd)(x).float()
    if local:
        cond, meta["text_encoder"] = comfy_cond, "ComfyUI Llama2_ (LOCAL STAND-IN)"
    else:
        import transformers
        cond = qwen3_transformers(te_sd)(x).float()
        meta["text_encoder"] = f"transformers {transformers.__version__} Qwen3Model hidden_states[-2]"
        meta["text_encoder_vs_comfyui_llama"] = "%.3g" % rel_err(comfy_cond, cond)
        print("Qwen3: transformers vs ComfyUI Llama2_ rel err", meta["text_encoder_vs_comfyui_llama"])
        if rel_err(comfy_cond, cond) > 1e-5:
            DISAGREEMENTS.append("Qwen3: transformers and ComfyUI's Llama2_ differ by "
                                 + meta["text_encoder_vs_comfyui_llama"])
    positive = [[cond, {"pooled_output": None, "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}]]
    return ids, positive


def sample(comfy_dir, patcher, positive, negative, g):
    """EmptySD3LatentImage, ModelSamplingAuraFlow(3), then KSampler (nodes.common_ksampler: noise
    from the seed, comfy.sample.sample with res_multistep / simple / denoise 1, cfg 1)."""
    import comfy
    import comfy.model_sampling  # noqa: F401  (the node module reads comfy.model_sampling)
    import comfy.sample
    import comfy.samplers
    latent = torch.zeros([1, 16, HEIGHT // 8, WIDTH // 8])
    ns = {"comfy": sys.modules["comfy"], "torch": torch, "nodes": types.SimpleNamespace(MAX_RESOLUTION=16384)}
    node_class(comfy_dir, "comfy_extras/nodes_model_advanced.py", "ModelSamplingSD3", ns)
    aura = node_class(comfy_dir, "comfy_extras/nodes_model_advanced.py", "ModelSamplingAuraFlow", ns)
    patched = aura().patch_aura(patcher, SHIFT)[0]
    ms = patched.get_model_object("model_sampling")
    sigmas = comfy.samplers.calculate_sigmas(ms, SCHEDULER, STEPS)
    latent_image = comfy.sample.fix_empty_latent_channels(patched, latent)
    noise = comfy.sample.prepare_noise(latent_image, SEED, None)
    samples, steps_x, steps_denoised = sample_recording_steps(
        patched, noise, STEPS, CFG, SAMPLER, SCHEDULER, positive, negative, latent_image, SEED)
    shift = float(ms.shift)
    del patched  # its __del__ needs ComfyUI's modules, gone at interpreter exit
    g.update({"sigmas": f32(sigmas), "noise": f32(noise), "steps.x": f32(steps_x),
              "steps.denoised": f32(steps_denoised), "latent": f32(samples)})
    print("shift", shift, "sigmas", [round(float(s), 6) for s in sigmas])
    return samples, shift


def decode_and_save(vae, samples, out_dir, g):
    """VAEDecode (comfy.sd.VAE.decode: clamp((decode + 1) / 2, 0, 1), channels last), then
    SaveImage's clip(255 * x, 0, 255) as uint8."""
    image = torch.clamp((vae.decode(samples.float()).float() + 1.0) / 2.0, min=0.0, max=1.0)
    image = image.movedim(1, -1)
    png = np.clip(255.0 * image[0].numpy(), 0, 255).astype(np.uint8)
    save_png(os.path.join(out_dir, PNG), png)
    g.update({"image": f32(image), "png": png[None]})
    print("latent mean/std %.4f %.4f" % (float(samples.mean()), float(samples.std())),
          "png mean %.1f std %.1f" % (float(png.mean()), float(png.std())), "shape", png.shape)


def make_models(models_dir, dit_model, mdg, vae, meta):
    """The three files by the weight rule, and the state dicts the references load from them
    (read back from the files: exactly what a loader gets)."""
    dit_shapes = {k: tuple(v.shape) for k, v in mdg.comfy_state_dict(dit_model).items()}
    import make_llm_golden
    te_shapes = {k: tuple(v.shape) for k, v in make_llm_golden.comfy_model(LLM_CONFIG).state_dict().items()}
    vae_shapes = {k: tuple(v.shape) for k, v in vae.state_dict().items()}
    configs = {"dit": json.dumps(dict(DIT_CONFIG, t_mid=DIT_T_MID)), "te": json.dumps(LLM_CONFIG),
               "vae": json.dumps(VAE_CONFIG)}
    sds = {}
    for part, shapes in (("dit", dit_shapes), ("te", te_shapes), ("vae", vae_shapes)):
        path = os.path.join(models_dir, FILES[part])
        file_meta = {"generator": "make_zimage_e2e_golden.py", "weight_seed": str(flux_e2e.WEIGHT_SEED),
                     "config": configs[part]}
        header, sha, check = write_model_file(path, rule_state_dict(shapes), file_meta)
        meta.update({f"{part}.file": FILES[part], f"{part}.header": header, f"{part}.sha256": sha,
                     f"{part}.checksum64": check, f"{part}.config": configs[part]})
        sds[part] = load_safetensors(path)
    return sds


def run(args):
    shimmed = import_comfy(os.path.abspath(args.comfy))
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)  # one thread, one summation order
    out_dir = args.out or HERE
    models_dir = args.models or tempfile.mkdtemp(prefix="zimage_e2e_models_")
    os.makedirs(out_dir, exist_ok=True)
    meta = {"comfyui": "a125cd84", "torch": torch.__version__, "prompt": PROMPT, "seed": str(SEED),
            "steps": str(STEPS), "cfg": str(CFG), "sampler": SAMPLER, "scheduler": SCHEDULER,
            "width": str(WIDTH), "height": str(HEIGHT),
            "standins": "yes: LOCAL DRY RUN, do not commit" if args.local_standins else "none"}

    mdg, dit_model = build_dit(args.diffusers)
    vae = build_vae()
    sds = make_models(models_dir, dit_model, mdg, vae, meta)
    dit_model.load_state_dict(diffusers_from_comfy({k: v.float() for k, v in sds["dit"].items()},
                                                   dit_model.state_dict().keys()), strict=True)
    vae.load_state_dict({k: v.float() for k, v in sds["vae"].items()}, strict=True)
    with open(os.path.join(out_dir, WORKFLOW), "w") as f:
        json.dump(api_workflow(FILES), f, indent=1)
        f.write("\n")

    g = {}
    ids, positive = encode_prompt(sds["te"], args.local_standins, g, meta)
    zero_out = node_class(args.comfy, "nodes.py", "ConditioningZeroOut", {"torch": torch})
    negative = zero_out().zero_out(positive)[0]
    g.update({"tokens.positive.ids": np.array([ids], dtype=np.int64),
              "cond.positive": f32(positive[0][0]), "cond.negative": f32(negative[0][0])})
    patcher = comfy_diffusion_model(dit_model)
    samples, shift = sample(args.comfy, patcher, positive, negative, g)
    del patcher
    decode_and_save(vae, samples, out_dir, g)
    meta.update({"shift": repr(shift), "shimmed": shimmed(),
                 "dit": "diffusers ZImageTransformer2DModel (transformer_z_image.py via "
                        "make_dit_golden.load_model_module)"})
    save_safetensors(os.path.join(out_dir, GOLDEN), g, meta)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in (GOLDEN, PNG, WORKFLOW))
    print(f"golden files: {size} bytes; models in {models_dir}; shimmed: {meta['shimmed']}")
    assert size < 3_000_000, size


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--comfy")
    p.add_argument("--diffusers")
    p.add_argument("--out")
    p.add_argument("--models")
    p.add_argument("--local-standins", action="store_true")
    p.add_argument("--models-from-golden", nargs=2, metavar=("GOLDEN", "MODELS_DIR"))
    args = p.parse_args()
    if args.models_from_golden:
        sys.exit(0 if models_from_golden(*args.models_from_golden) else 1)
    if not args.comfy:
        p.error("--comfy is required")
    if not args.diffusers:
        for d in (os.path.join(REPO, "bench", "peers", "diffusers"), "/work/shared/peers/diffusers"):
            if os.path.isdir(os.path.join(d, "src", "diffusers")):
                args.diffusers = d
                break
        else:
            p.error("no diffusers checkout found: give --diffusers")
    run(args)
    for d in DISAGREEMENTS:
        print("DISAGREEMENT:", d)
    sys.exit(3 if DISAGREEMENTS else 0)


if __name__ == "__main__":
    main()
