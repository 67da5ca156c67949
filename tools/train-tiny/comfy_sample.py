"""ComfyUI's SD1 text-to-image path in PyTorch, for the trained models: the EPS discrete
schedule, the `normal` scheduler, CFG on denoised values, the euler sampler, noise from
ComfyUI's prepare_noise and SaveImage's 8-bit conversion. Formulas as in
../shared/golden/README.md ("Sigmas", "Sampling runs")."""
import math

import numpy as np
import torch

LATENT_SCALE = 0.18215  # SD1: model-space latent = VAE-space latent * 0.18215


class DiscreteSchedule:
    """ComfyUI ModelSamplingDiscrete for SD1 ("linear" in ComfyUI, scaled_linear elsewhere)."""

    def __init__(self, beta_start=0.00085, beta_end=0.012, steps=1000):
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, steps, dtype=torch.float64) ** 2
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        sigmas = ((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5
        self.sigmas = sigmas.float()
        self.log_sigmas = sigmas.log().float()

    def timestep(self, sigma):
        return (torch.log(sigma) - self.log_sigmas).abs().argmin()

    def sigma(self, t):
        t = torch.clamp(torch.as_tensor(t, dtype=torch.float32), 0, len(self.sigmas) - 1)
        lo, hi, w = t.floor().long(), t.ceil().long(), t.frac()
        return ((1 - w) * self.log_sigmas[lo] + w * self.log_sigmas[hi]).exp()

    def normal_sigmas(self, steps):
        start, end = self.timestep(self.sigmas[-1]), self.timestep(self.sigmas[0])
        ts = torch.linspace(float(start), float(end), steps)
        return torch.stack([self.sigma(t) for t in ts] + [torch.tensor(0.0)])


def prepare_noise(shape, seed):
    return torch.randn(shape, generator=torch.manual_seed(seed), device="cpu")


@torch.no_grad()
def euler_cfg(unet, noise, cond, uncond, cfg, steps, schedule):
    """The model-space latent after ComfyUI's KSampler (euler, normal, denoise 1)."""
    sigmas = schedule.normal_sigmas(steps)
    x = noise * torch.sqrt(1.0 + sigmas[0] ** 2)  # max_denoise: the empty latent is zero
    context = torch.cat([cond, uncond])
    for i in range(steps):
        s = sigmas[i]
        t = schedule.timestep(s).float().expand(2)
        x_in = torch.cat([x, x]) / torch.sqrt(s * s + 1)
        eps = unet(x_in, t, context)
        den_c, den_u = (torch.cat([x, x]) - eps * s).chunk(2)
        den = den_u + (den_c - den_u) * cfg
        x = x + (x - den) / s * (sigmas[i + 1] - s)
    return x


def to_uint8(image):
    """SaveImage: clamp((x + 1) / 2) * 255, truncated as numpy's astype does; [3, H, W] -> HWC."""
    img = torch.clamp((image + 1.0) / 2.0, 0.0, 1.0)
    arr = 255.0 * img.permute(1, 2, 0).cpu().numpy()
    return np.clip(arr, 0, 255).astype(np.uint8)


@torch.no_grad()
def text_to_image(models, tokenizer, positive, negative, seed, steps=20, cfg=8.0, size=256):
    """ComfyUI's default workflow on the PyTorch models: (uint8 HWC image, model latent)."""
    unet, vae, clip = models
    rows = torch.tensor([tokenizer.comfy_row(positive), tokenizer.comfy_row(negative)])
    cond, uncond = clip(rows).chunk(2)
    noise = prepare_noise((1, 4, size // 8, size // 8), seed)
    latent = euler_cfg(unet, noise, cond, uncond, cfg, steps, DiscreteSchedule())
    image = vae.decode(latent / LATENT_SCALE)[0]
    return to_uint8(image), latent


def sigma_check():
    """The normal schedule's ends, as the golden README states them."""
    s = DiscreteSchedule().normal_sigmas(20)
    assert math.isclose(float(s[0]), 14.614641, rel_tol=1e-5), float(s[0])
    assert float(s[-1]) == 0.0
    return s
