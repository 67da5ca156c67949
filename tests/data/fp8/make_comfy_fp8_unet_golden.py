#!/usr/bin/env python3
"""ComfyUI's fp8 UNet on the GPU machine: the tiny SD1 and SDXL checkpoints stored as
float8_e4m3fn at load (UNETLoader weight_dtype fp8_e4m3fn and fp8_e4m3fn_fast), one UNet call
each in float16 on CUDA, with ComfyUI's own layer classes (comfy/ops.py manual_cast: dequantize
before use; fp8_ops: torch._scaled_mm for the linear layers) and its own UNetModel
(comfy/ldm/modules/diffusionmodules/openaimodel.py), on the inputs of golden-unet-vae.

Usage: make_comfy_fp8_unet_golden.py COMFYUI_DIR GOLDEN_DIR OUT.safetensors
  COMFYUI_DIR: ComfyUI a125cd84's .py files (comfy/...). GOLDEN_DIR: tiny-sd1/tiny-sdxl and
  golden-unet-vae.safetensors (tests/data/golden). Needs torch >= 2.1 with CUDA on an sm_89+ GPU.

The model config comes from ComfyUI's detect_unet_config with the tiny models' heads (8 heads in
SD1, 32 channels per head in SDXL; shapes do not show them, golden README). As a check of that
config the script first runs the same model unquantized in float32 and compares with the
golden's float32 output (printed; must be < 1e-4).
Writes fp8.<mode>.<model>.out (float32 copies of the float16 outputs), mode in dequant, fast.
"""
import sys

import torch
from safetensors.torch import load_file, save_file

COMFY, GOLDEN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, COMFY)
import comfy.model_detection  # noqa: E402
import comfy.ops  # noqa: E402
from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel  # noqa: E402

PREFIX = "model.diffusion_model."
MODELS = {"sd1": ("tiny-sd1.safetensors", {"num_heads": 8, "num_head_channels": -1}),
          "sdxl": ("tiny-sdxl.safetensors", {"num_heads": -1, "num_head_channels": 32})}


def unet(ckpt, heads, dtype, ops):
    cfg = comfy.model_detection.detect_unet_config(ckpt, PREFIX)
    cfg.update(heads)
    cfg["dtype"] = dtype
    m = UNetModel(**cfg, device="cuda", operations=ops)
    sd = {k[len(PREFIX):]: v for k, v in ckpt.items() if k.startswith(PREFIX)}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("position_ids" in k for k in missing), missing
    return m.eval()


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def main():
    # The config check compares with a float32 CPU golden: no TF32 in cuDNN's convolutions.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    golden = load_file(GOLDEN + "/golden-unet-vae.safetensors")
    out = {}
    with torch.no_grad():
        for name, (file, heads) in MODELS.items():
            ckpt = load_file(GOLDEN + "/" + file)
            ins = {k: golden[f"unet.{name}.{k}"].cuda() for k in ("x", "timesteps", "context")}
            y = golden.get(f"unet.{name}.y")
            if y is not None:
                ins["y"] = y.cuda()
            ref = unet(ckpt, heads, torch.float32, comfy.ops.disable_weight_init)
            check = rel(ref(**ins).cpu(), golden[f"unet.{name}.out"])
            print(f"{name}: ComfyUI float32 UNet vs golden rel err {check:.3g}")
            assert check < 1e-4, "the tiny model's config does not match the golden"
            half = {k: v.half() for k, v in ins.items() if k != "timesteps"}
            half["timesteps"] = ins["timesteps"]
            for mode, ops in (("dequant", comfy.ops.manual_cast), ("fast", comfy.ops.fp8_ops)):
                m = unet(ckpt, heads, torch.float8_e4m3fn, ops)
                o = m(**half).float().cpu()
                out[f"fp8.{mode}.{name}.out"] = o.contiguous()
                print(f"{name} {mode}: rel to f32 golden {rel(o, golden[f'unet.{name}.out']):.3g}")
    save_file(out, OUT, metadata={"comfyui": "a125cd84", "torch": torch.__version__,
                                  "device": torch.cuda.get_device_name(0)})


main()
