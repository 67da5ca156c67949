"""The CPU check of bench/torch_peer_zimage.py's DiT half where diffusers does not import (no
huggingface_hub, torch 1.x): diffusers' own transformer_z_image.py is loaded with the stand-ins
for its package imports of tests/data/zimage/make_dit_golden.py, registered as
diffusers.ZImageTransformer2DModel, and the peer runs as on the GPU machine (phases, rows, JSON).
With --fake-compile, torch.compile is the identity (torch 1.x has none), so the compile path's
rows are written too. The Qwen3 half needs transformers: without it its row is an error.

  OUT=/tmp/zp SIZE=tiny DEVICE=cpu ITERS=2 /usr/bin/python3 bench/torch_peer_zimage_cpu.py \\
      [--fake-compile] [--diffusers /work/shared/peers/diffusers]
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "data", "zimage"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import make_dit_golden  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fake-compile", action="store_true")
    ap.add_argument("--diffusers", default="/work/shared/peers/diffusers")
    args = ap.parse_args()
    if args.fake_compile:
        torch.compile = lambda module, **kw: module
    mod = make_dit_golden.load_model_module(args.diffusers)
    sys.modules["diffusers"].ZImageTransformer2DModel = mod.ZImageTransformer2DModel
    import torch_peer_zimage
    return torch_peer_zimage.measure()


if __name__ == "__main__":
    sys.exit(main())
