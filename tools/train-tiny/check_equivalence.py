"""Does headroom read the exported checkpoint as PyTorch computes it? Runs the default workflow
(CLIPTextEncode x2, euler + normal + CFG, VAEDecode, SaveImage) once through `headroom run` and
once through comfy_sample.py on the same file, and compares the PNGs' pixels.

    python3 check_equivalence.py --headroom build-train/headroom                # random weights
    python3 check_equivalence.py --headroom build-train/headroom \\
        --checkpoint models/checkpoints/headroom-tiny-sd1.safetensors            # trained weights
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image

import comfy_sample
import tiny_sd1
from clip_bpe import CLIPBPE

REPO = os.path.normpath(os.path.join(tiny_sd1.HERE, "..", ".."))
NAME = "headroom-tiny-sd1.safetensors"


def random_checkpoint(path, cfg, tok, seed):
    """Default PyTorch init, plus random norm scales/shifts and biases, so that a reader that
    drops or swaps any of them cannot match."""
    torch.manual_seed(seed)
    models = tiny_sd1.build(cfg, tok)
    with torch.no_grad():
        for m in models:
            for name, p in m.named_parameters():
                if p.ndim == 1:
                    p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            m.eval()
        models[2].token_rows.normal_(0, 1.0)
        models[2].position_embedding.normal_(0, 0.3)
    tiny_sd1.export(path, models, cfg, {"headroom.note": "random weights for check_equivalence"})


def workflow(positive, negative, seed, steps, size):
    with open(os.path.join(REPO, "examples", "default_workflow.json")) as f:
        wf = json.load(f)
    wf["3"]["inputs"].update(seed=seed, steps=steps, cfg=8.0, sampler_name="euler", scheduler="normal")
    wf["4"]["inputs"]["ckpt_name"] = NAME
    wf["5"]["inputs"].update(width=size, height=size)
    wf["6"]["inputs"]["text"] = positive
    wf["7"]["inputs"]["text"] = negative
    return wf


def run_headroom(binary, wf, models_dir, out_dir):
    wf_path = os.path.join(out_dir, "wf.json")
    with open(wf_path, "w") as f:
        json.dump(wf, f)
    t0 = time.time()
    r = subprocess.run([binary, "run", wf_path, "--models-dir", models_dir, "--output-dir", out_dir,
                        "--device", "cpu", "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"headroom failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    png = sorted(p for p in os.listdir(out_dir) if p.endswith(".png"))[-1]
    return np.asarray(Image.open(os.path.join(out_dir, png)).convert("RGB")), time.time() - t0


def compare(a, b):
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    return {"max": int(d.max()), "mean": float(d.mean()), "within1": float((d <= 1).mean()),
            "within3": float((d <= 3).mean())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headroom", required=True)
    ap.add_argument("--checkpoint", help="an exported checkpoint (default: random weights)")
    ap.add_argument("--prompt", default="a red circle on a blue background")
    ap.add_argument("--negative", default="")
    ap.add_argument("--seed", type=int, default=156680208700286)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--save", help="folder for both PNGs")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg, tok = tiny_sd1.load_config(), CLIPBPE()
    work = tempfile.mkdtemp(prefix="hr_equiv_")
    try:
        ckpt_dir = os.path.join(work, "models", "checkpoints")
        os.makedirs(ckpt_dir)
        ckpt = os.path.join(ckpt_dir, NAME)
        if args.checkpoint:
            shutil.copy(args.checkpoint, ckpt)
            shutil.copy(os.path.splitext(args.checkpoint)[0] + ".yaml", os.path.splitext(ckpt)[0] + ".yaml")
        else:
            random_checkpoint(ckpt, cfg, tok, seed=1)
        wf = workflow(args.prompt, args.negative, args.seed, args.steps, args.size)
        ours, t_hr = run_headroom(os.path.abspath(args.headroom), wf, os.path.join(work, "models"), work)
        t0 = time.time()
        ref, latent = comfy_sample.text_to_image(tiny_sd1.load(ckpt, cfg, tok), tok, args.prompt, args.negative,
                                                 args.seed, args.steps, 8.0, args.size)
        t_pt = time.time() - t0
        s = compare(ours, ref)
        print(f"prompt {args.prompt!r} / {args.negative!r}, seed {args.seed}, {args.steps} steps, "
              f"{args.size}px: |latent| max {latent.abs().max():.2f}")
        print(f"headroom vs PyTorch: max |d| {s['max']}, mean |d| {s['mean']:.4f}, "
              f"{100 * s['within1']:.2f}% within 1, {100 * s['within3']:.2f}% within 3 "
              f"(headroom {t_hr:.1f} s, PyTorch {t_pt:.1f} s)")
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            Image.fromarray(ours).save(os.path.join(args.save, "headroom.png"))
            Image.fromarray(ref).save(os.path.join(args.save, "pytorch.png"))
        return 0 if s["max"] <= 8 and s["within1"] > 0.99 else 1
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    sys.exit(main())
