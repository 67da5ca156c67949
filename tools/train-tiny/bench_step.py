"""Times training steps of the UNet (+ text encoder) and the VAE on the GPU for a few layouts,
to choose batch size and memory format (python3 bench_step.py [--quick])."""
import sys
import time

import torch

import tiny_sd1
from clip_bpe import CLIPBPE


def timed(fn, warm=3, reps=8):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.time() - t0) / reps


def unet_case(cfg, tok, batch, channels_last):
    unet, _, clip = (m.cuda() for m in tiny_sd1.build(cfg, tok))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    unet.to(memory_format=fmt)
    opt = torch.optim.AdamW(list(unet.parameters()) + list(clip.parameters()), lr=1e-4, fused=True)
    x = torch.randn(batch, 4, 32, 32, device="cuda").contiguous(memory_format=fmt)
    t = torch.randint(0, 1000, (batch,), device="cuda").float()
    ids = torch.full((batch, 77), 49407, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = unet(x, t, clip(ids)).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return timed(step)


def vae_case(cfg, tok, batch, channels_last):
    _, vae, _ = tiny_sd1.build(cfg, tok)
    vae.cuda()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    vae.to(memory_format=fmt)
    opt = torch.optim.AdamW(vae.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, 3, 256, 256, device="cuda").contiguous(memory_format=fmt)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m, _ = vae.encode(x)
            loss = (vae.decode(m).float() - x).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return timed(step)


def main():
    torch.backends.cudnn.benchmark = True
    cfg, tok = tiny_sd1.load_config(), CLIPBPE()
    for batch, cl in ((256, True), (256, False), (1024, False), (1024, True)):
        s = unet_case(cfg, tok, batch, cl)
        print(f"unet batch {batch} channels_last {cl}: {1000 * s:.1f} ms/step, {batch / s:.0f} samples/s", flush=True)
    for batch, cl in ((32, True), (32, False), (64, False)):
        s = vae_case(cfg, tok, batch, cl)
        print(f"vae batch {batch} channels_last {cl}: {1000 * s:.1f} ms/step, {batch / s:.0f} images/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
