"""Trains headroom's default model in resumable chunks: the VAE first, then the UNet with the
text encoder on the VAE's latents, then the decoder alone (Note [decoder stage]). Every setting
is in config.json; the seed fixes the data.

    python3 train.py --run-dir runs/main --minutes 9.4      # one chunk; run again to resume
    python3 train.py --run-dir runs/main --minutes 1 --device cpu --export PATH   # export only
    python3 train.py --config config-tune.json --run-dir runs/tune --minutes 9.3 \
        --init-from runs/base.safetensors        # fine-tune an exported model (Note [fine-tuning])

Each call stops itself before --minutes, saves the resume state (state.pt: f32 weights, Adam
moments in bf16, EMA; compact.pt: f16 weights and EMA, no optimizer, small enough to carry),
exports <run-dir>/headroom-tiny-sd1.safetensors (+ .yaml, from the EMA weights) and draws
samples.png. Note [deterministic data]: the batch of step k is drawn from a generator seeded
with (seed, stage, k), so a resumed run sees the data an uninterrupted one would.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

import comfy_sample
import safetensors_io
import shapes
import tiny_sd1
from clip_bpe import CLIPBPE

CKPT = "headroom-tiny-sd1.safetensors"
PREVIEW = (["a red circle on a blue background"] + shapes.TEST_CAPTIONS  # README's prompt, held-out
           + ["a small blue ring on white", "a yellow diamond on a black background",
              "an orange star in the bottom left on a blue background"])


def log(run_dir, text):
    print(text, flush=True)
    with open(os.path.join(run_dir, "log.txt"), "a") as f:
        f.write(text + "\n")


def step_generator(seed, stage, step, device):
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + stage * 100_000_007 + step)


def lr_at(tc, step, progress, warm_from=0):
    """Linear warmup from the optimizer's (re)start, then cosine from lr to lr / 10 over the
    stage's progress."""
    warm = min(1.0, (step - warm_from + 1) / tc["warmup"])
    return tc["lr"] * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def param_groups(modules, weight_decay):
    decay, plain = [], []
    for m in modules:
        for name, p in m.named_parameters():
            (decay if p.ndim >= 2 and name != "token_rows" else plain).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


class Trainer:
    def __init__(self, cfg, device, run_dir):
        self.cfg, self.device, self.run_dir = cfg, device, run_dir
        self.tok = CLIPBPE()
        torch.manual_seed(cfg["seed"])
        self.unet, self.vae, self.clip = (m.to(device) for m in tiny_sd1.build(cfg, self.tok))
        if device.type == "cuda":
            self.unet.to(memory_format=torch.channels_last)
            self.vae.to(memory_format=torch.channels_last)
        self.s = {"stage": "vae", "vae_steps": 0, "unet_steps": 0, "dec_steps": 0, "vae_seconds": 0.0,
                  "unet_seconds": 0.0, "dec_seconds": 0.0, "losses": {}}
        self.vae_opt = self._adamw([self.vae], cfg["vae_train"]) if "vae_train" in cfg else None
        self.opt = self._adamw([self.unet, self.clip], cfg["unet_train"])
        self.ema = None
        self.rows = {}
        self.pool = None

    def _adamw(self, modules, tc):
        groups = param_groups(modules, tc.get("weight_decay", 0.0))
        kw = {"lr": tc["lr"], "betas": (0.9, 0.999), "eps": 1e-8}
        if self.device.type == "cuda":
            try:
                return torch.optim.AdamW(groups, fused=True, **kw)
            except (TypeError, RuntimeError):
                pass
        return torch.optim.AdamW(groups, **kw)

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    def progress(self, stage):
        tc = self.cfg[stage + "_train"]
        p = self.s.get(stage + "_seconds", 0.0) / (60 * tc["minutes"])
        if tc.get("steps"):
            p = max(p, self.s.get(stage + "_steps", 0) / tc["steps"])
        return p

    def stage_done(self, stage):
        return self.progress(stage) >= 1.0

    # --- VAE -----------------------------------------------------------------------------------

    def vae_step(self):
        tc, k = self.cfg["vae_train"], self.s["vae_steps"]
        gen = step_generator(self.cfg["seed"], 1, k, self.device)
        x, _ = shapes.batch(tc["batch"], gen, self.device)
        x = random_crop(x, tc.get("crop", shapes.SIZE), gen)
        x = x.contiguous(memory_format=torch.channels_last) if self.device.type == "cuda" else x
        for g in self.vae_opt.param_groups:
            g["lr"] = lr_at(tc, k, self.progress("vae"))
        with self.autocast():
            mean, logvar = self.vae.encode(x)
            z = mean + torch.exp(0.5 * logvar) * torch.randn(mean.shape, generator=gen, device=self.device)
            rec = self.vae.decode(z).float()
        l1 = (rec - x).abs().mean()
        l2 = ((rec - x) ** 2).mean()
        kl = 0.5 * (mean.float() ** 2 + logvar.float().exp() - 1 - logvar.float()).mean()
        loss = l1 + tc["l2_weight"] * l2 + tc["kl_weight"] * kl
        self.vae_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.vae_opt.step()
        self.s["vae_steps"] += 1
        return {"l1": l1.detach(), "l2": l2.detach(), "kl": kl.detach()}

    @torch.no_grad()
    def vae_finish(self):
        """Note [latent normalisation] in tiny_sd1.py, on stats_batches x 256 samples."""
        self.vae.eval()
        means = []
        for i in range(self.cfg["vae_train"]["stats_batches"]):
            x, _ = shapes.batch(256, step_generator(self.cfg["seed"], 2, i, self.device), self.device)
            with self.autocast():
                means.append(self.vae.encode(x)[0].float())
        m = torch.cat(means)
        mu, sd = m.mean(dim=(0, 2, 3)), m.std(dim=(0, 2, 3))
        tiny_sd1.fold_latent_normalization(self.vae, mu, sd)
        log(self.run_dir, f"latent channels: mean {mu.tolist()}, std {sd.tolist()} (folded)")
        self.s["stage"] = "unet"
        self.vae_opt = None
        self.vae.requires_grad_(False)

    # --- decoder fine-tuning --------------------------------------------------------------------

    def dec_begin(self):
        """Note [decoder stage]: after the UNet, the decoder (and post_quant_conv) train on
        (encoder mean + small noise) -> image with the encoder frozen, so the latent space the
        UNet learnt stays as it is while decoded pictures get cleaner and tolerate the small
        errors of sampled latents."""
        self.s["stage"] = "dec"
        self.dec_params = list(self.vae.decoder.parameters()) + list(self.vae.post_quant_conv.parameters())
        for p in self.dec_params:
            p.requires_grad_(True)
        self.dec_opt = self._adamw([self.vae.decoder, self.vae.post_quant_conv], self.cfg["dec_train"])

    def dec_step(self):
        tc, k = self.cfg["dec_train"], self.s.setdefault("dec_steps", 0)
        gen = step_generator(self.cfg["seed"], 6, k, self.device)
        x, _ = shapes.batch(tc["batch"], gen, self.device)
        x = x.contiguous(memory_format=torch.channels_last) if self.device.type == "cuda" else x
        for g in self.dec_opt.param_groups:
            g["lr"] = lr_at(tc, k, self.progress("dec"))
        with torch.no_grad(), self.autocast():
            z = self.vae.encode(x)[0].float()
        z = z + (tc["latent_noise"] / comfy_sample.LATENT_SCALE) * torch.randn(z.shape, generator=gen, device=self.device)
        with self.autocast():
            rec = self.vae.decode(z).float()
        l1 = (rec - x).abs().mean()
        l2 = ((rec - x) ** 2).mean()
        loss = l1 + tc["l2_weight"] * l2
        self.dec_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.dec_opt.step()
        self.s["dec_steps"] += 1
        return {"l1": l1.detach(), "l2": l2.detach()}

    # --- UNet + text encoder -------------------------------------------------------------------

    def token_rows(self, captions):
        for c in captions:
            if c not in self.rows:
                self.rows[c] = self.tok.comfy_row(c)
        return torch.tensor([self.rows[c] for c in captions], device=self.device)

    @torch.no_grad()
    def fill_pool(self, index):
        """Note [latent pool]: encoding 256 images per step would cost more than the UNet step,
        so a pool of pool_size samples is drawn and encoded once and used for pool_steps steps."""
        tc = self.cfg["unet_train"]
        gen = step_generator(self.cfg["seed"], 3, index, self.device)
        lat, rows = [], []
        chunk = min(512, tc["pool_size"])
        for _ in range(tc["pool_size"] // chunk):
            x, caps = shapes.batch(chunk, gen, self.device)
            with self.autocast():
                lat.append((self.vae.encode(x)[0] * comfy_sample.LATENT_SCALE).to(torch.bfloat16))
            rows.append(self.token_rows(caps))
        self.pool = (index, torch.cat(lat), torch.cat(rows))

    def unet_step(self, schedule):
        tc, k = self.cfg["unet_train"], self.s["unet_steps"]
        pool_index = k // tc["pool_steps"]
        if self.pool is None or self.pool[0] != pool_index:
            self.fill_pool(pool_index)
        _, lat, rows = self.pool
        gen = step_generator(self.cfg["seed"], 4, k, self.device)
        b = tc["batch"]
        pick = torch.randint(0, len(lat), (b,), generator=gen, device=self.device)
        x0, ids = lat[pick].float(), rows[pick].clone()
        drop = torch.rand(b, generator=gen, device=self.device) < tc["caption_dropout"]
        ids[drop] = self.token_rows([""])[0]
        t = torch.randint(0, 1000, (b,), generator=gen, device=self.device)
        noise = train_noise(x0.shape, tc, gen, self.device)
        acp = schedule[t][:, None, None, None]
        xt = acp.sqrt() * x0 + (1 - acp).sqrt() * noise
        if self.device.type == "cuda":
            xt = xt.contiguous(memory_format=torch.channels_last)
        for g in self.opt.param_groups:
            g["lr"] = lr_at(tc, k, self.progress("unet"), self.s.get("warm_from", 0))
        with self.autocast():
            eps = self.unet(xt, t.float(), self.clip(ids)).float()
        snr = acp.flatten() / (1 - acp.flatten())
        w = torch.clamp(snr, max=tc["min_snr_gamma"]) / snr
        loss = (w * ((eps - noise) ** 2).mean(dim=(1, 2, 3))).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params(), tc["grad_clip"])
        self.opt.step()
        self.ema_update(k)
        self.s["unet_steps"] += 1
        return {"loss": loss.detach(), "mse": ((eps.detach() - noise) ** 2).mean()}

    def current_lr(self):
        opt = {"vae": self.vae_opt, "unet": self.opt, "dec": getattr(self, "dec_opt", None)}[self.s["stage"]]
        return opt.param_groups[0]["lr"]

    def params(self):
        return [p for m in (self.unet, self.clip) for p in m.parameters()]

    @torch.no_grad()
    def ema_update(self, k):
        tc = self.cfg["unet_train"]
        if self.ema is None or k < tc["ema_start"]:
            self.ema = [p.detach().float().clone() for p in self.params()]
            return
        d = tc["ema_decay"]
        torch._foreach_mul_(self.ema, d)
        torch._foreach_add_(self.ema, [p.detach().float() for p in self.params()], alpha=1 - d)

    def ema_models(self):
        """CPU copies of the three models with the EMA weights in the UNet and text encoder."""
        unet, vae, clip = tiny_sd1.build(self.cfg, self.tok)
        unet.load_state_dict({k: v.cpu() for k, v in self.unet.state_dict().items()})
        vae.load_state_dict({k: v.cpu() for k, v in self.vae.state_dict().items()})
        clip.load_state_dict({k: v.cpu() for k, v in self.clip.state_dict().items()})
        if self.ema is not None:
            with torch.no_grad():
                for p, e in zip([p for m in (unet, clip) for p in m.parameters()], self.ema):
                    p.copy_(e.cpu())
        return unet.eval(), vae.eval(), clip.eval()

    # --- state ---------------------------------------------------------------------------------

    def state(self, compact):
        half = torch.float16 if compact else torch.float32
        weights = {n: {k: v.detach().cpu().to(half) if v.is_floating_point() else v.cpu()
                       for k, v in m.state_dict().items()}
                   for n, m in (("unet", self.unet), ("vae", self.vae), ("clip", self.clip))}
        out = {"s": self.s, "weights": weights,
               "ema": None if self.ema is None else [e.cpu().to(half) for e in self.ema]}
        if not compact:
            out["opt"] = self._opt_state(self.opt)
            out["vae_opt"] = self._opt_state(self.vae_opt) if self.vae_opt else None
            out["dec_opt"] = self._opt_state(self.dec_opt) if getattr(self, "dec_opt", None) else None
        return out

    @staticmethod
    def _opt_state(opt):
        sd = opt.state_dict()  # its per-parameter dicts are the optimizer's own: copy them
        moments = ("exp_avg", "exp_avg_sq")
        sd["state"] = {i: {k: v.cpu().to(torch.bfloat16) if k in moments else v.cpu() for k, v in st.items()}
                       for i, st in sd["state"].items()}
        return sd

    def save(self):
        for compact, name in ((False, "state.pt"), (True, "compact.pt")):
            tmp = os.path.join(self.run_dir, name + ".tmp")
            torch.save(self.state(compact), tmp)
            os.replace(tmp, os.path.join(self.run_dir, name))

    def load(self, st):
        self.s = st["s"]
        for n, m in (("unet", self.unet), ("vae", self.vae), ("clip", self.clip)):
            m.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in st["weights"][n].items()})
        if st["ema"] is not None:
            self.ema = [e.float().to(self.device) for e in st["ema"]]
        if self.s["stage"] in ("unet", "dec"):
            self.vae_opt = None
            self.vae.requires_grad_(False).eval()
        if self.s["stage"] == "dec":
            self.dec_begin()
        for key, opt in (("opt", self.opt), ("vae_opt", self.vae_opt), ("dec_opt", getattr(self, "dec_opt", None))):
            if st.get(key) and opt is not None:
                opt.load_state_dict(st[key])  # moments come back as the params' dtype (f32)
        if "opt" not in st and self.s["stage"] == "unet":
            # compact state: Adam starts over; warm up again from here
            self.s["warm_from"] = self.s["unet_steps"]
            log(self.run_dir, f"resumed from the compact state at UNet step {self.s['unet_steps']}: "
                              "optimizer restarted with a fresh warmup")

    def init_from(self, path):
        """Note [fine-tuning]: a fresh run can start from an exported checkpoint (its EMA
        weights) at the UNet stage with the checkpoint's VAE frozen, e.g. to add offset and
        pyramid noise (config-tune.json) to a model trained without them. The step counts go on
        from the file's headroom.train.* values (so the batches are new ones and the export
        counts all steps), warmup restarts there, and the stage's clock (minutes) starts at 0;
        the EMA starts from the loaded weights."""
        _, meta = safetensors_io.read(path)
        start = {k: int(meta.get(f"headroom.train.{k}_steps", 0)) for k in ("vae", "unet", "dec")}
        for m, loaded in zip((self.unet, self.vae, self.clip), tiny_sd1.load(path, self.cfg, self.tok)):
            m.load_state_dict(loaded.state_dict())
        steps = {k + "_steps": v for k, v in start.items()}
        self.s.update(steps, stage="unet", warm_from=start["unet"],
                      init_from={"path": os.path.basename(path), **steps})
        self.vae_opt = None
        self.vae.requires_grad_(False).eval()
        self.ema = [p.detach().float().clone() for p in self.params()]
        log(self.run_dir, f"initialised from {path} (vae step {start['vae']}, unet step {start['unet']}, "
                          f"dec step {start['dec']}): fine-tuning the UNet and text encoder")

    # --- outputs -------------------------------------------------------------------------------

    @torch.no_grad()
    def preview(self, path, seed=156680208700286):
        """PREVIEW captions through the ComfyUI sampler (euler, normal, 20 steps, CFG 8), all
        from the default workflow's seed, as tests/default_model renders them."""
        unet, vae, clip = (m.to(self.device) for m in self.ema_models())
        rows = self.token_rows(PREVIEW + [""])
        ctx = clip(rows)
        cond, uncond = ctx[:-1], ctx[-1:].expand(len(PREVIEW), -1, -1)
        sched = comfy_sample.DiscreteSchedule()
        noise = comfy_sample.prepare_noise((1, 4, 32, 32), seed).expand(len(PREVIEW), -1, -1, -1)
        sig = sched.normal_sigmas(20).to(self.device)
        x = noise.to(self.device) * torch.sqrt(1 + sig[0] ** 2)
        for i in range(20):
            s = sig[i]
            t = sched.timestep(s.cpu()).float().to(self.device).expand(2 * len(PREVIEW))
            x2 = torch.cat([x, x])
            eps = unet(x2 / torch.sqrt(s * s + 1), t, torch.cat([cond, uncond]))
            dc, du = (x2 - eps * s).chunk(2)
            x = x + (x - (du + (dc - du) * 8.0)) / s * (sig[i + 1] - s)
        imgs = (vae.decode(x / comfy_sample.LATENT_SCALE).clamp(-1, 1) + 1) / 2
        save_grid(imgs, path)
        with open(os.path.splitext(path)[0] + ".txt", "w") as f:
            f.write("\n".join(PREVIEW) + "\n")

    @torch.no_grad()
    def vae_preview(self, path):
        x, _ = shapes.batch(8, step_generator(self.cfg["seed"], 5, 0, self.device), self.device)
        self.vae.eval()
        rec = self.vae.decode(self.vae.encode(x)[0])
        self.vae.train()
        save_grid((torch.cat([x, rec.float()]).clamp(-1, 1) + 1) / 2, path)


def train_noise(shape, tc, gen, device):
    """Note [low-frequency noise]: SD1's schedule ends at sigma 14.6, not at zero signal, so at
    t = 999 the coarse content of x_t (the mean colour, the quadrant a shape is in) still leaks
    the picture; a model trained on that leak takes the background colour and the layout from
    the sampler's initial noise instead of the prompt. Extra noise at coarse scales (offset
    noise for the mean, a pyramid of upsampled noise with weights discount^level) hides the
    leak, so the prompt decides them. Both off (0) reproduces plain Gaussian noise."""
    b, c, h, w = shape
    noise = torch.randn(shape, generator=gen, device=device)
    discount = tc.get("pyramid_noise", 0.0)
    if discount > 0:
        for level in range(1, int(math.log2(h)) + 1):
            low = torch.randn(b, c, h >> level, w >> level, generator=gen, device=device)
            noise = noise + discount ** level * F.interpolate(low, size=(h, w), mode="bilinear",
                                                              align_corners=False)
        noise = noise / noise.std()
    offset = tc.get("offset_noise", 0.0)
    if offset > 0:
        noise = noise + offset * torch.randn(b, c, 1, 1, generator=gen, device=device)
    return noise


def random_crop(x, size, gen):
    """One random size x size window (a multiple of 8) for the whole batch: the VAE is
    convolutional, so smaller windows train the same filters at a fraction of the cost."""
    if size >= x.shape[-1]:
        return x
    top, left = (int(v) * 8 for v in torch.randint(0, (x.shape[-1] - size) // 8 + 1, (2,), generator=gen,
                                                   device=x.device))
    return x[:, :, top:top + size, left:left + size]


def save_grid(imgs, path, cols=8):
    from PIL import Image
    n, _, h, w = imgs.shape
    rows = (n + cols - 1) // cols
    grid = torch.zeros(3, rows * h, cols * w)
    for i, im in enumerate(imgs.float().cpu()):
        grid[:, (i // cols) * h:(i // cols + 1) * h, (i % cols) * w:(i % cols + 1) * w] = im
    Image.fromarray((grid * 255 + 0.5).clamp(0, 255).byte().permute(1, 2, 0).numpy()).save(path)


def train(tr, deadline):
    schedule = comfy_sample.DiscreteSchedule().alphas_cumprod.float().to(tr.device)
    sums, n, t_log = {}, 0, time.time()
    while time.time() < deadline:
        stage = tr.s["stage"]
        if stage == "vae" and tr.stage_done("vae"):
            tr.vae_preview(os.path.join(tr.run_dir, "vae.png"))
            tr.vae_finish()
            sums, n, t_log = {}, 0, time.time()
            continue
        if stage == "unet" and tr.stage_done("unet"):
            if "dec_train" not in tr.cfg:
                break
            tr.dec_begin()
            sums, n, t_log = {}, 0, time.time()
            continue
        if stage == "dec" and tr.stage_done("dec"):
            break
        t0 = time.time()
        m = {"vae": tr.vae_step, "unet": lambda: tr.unet_step(schedule), "dec": tr.dec_step}[stage]()
        tr.s[stage + "_seconds"] = tr.s.get(stage + "_seconds", 0.0) + time.time() - t0
        for k, v in m.items():
            sums[k] = sums.get(k, 0.0) + v
        n += 1
        k = tr.s[stage + "_steps"]
        if k % 200 == 0 or time.time() >= deadline or tr.stage_done(stage):
            avg = {key: float(v) / n for key, v in sums.items()}
            tr.s["losses"][stage] = avg
            rate = n / (time.time() - t_log)
            log(tr.run_dir, f"{stage} step {k}: " + ", ".join(f"{key} {v:.5f}" for key, v in avg.items())
                + f", lr {tr.current_lr():.2e}, {rate:.1f} steps/s,"
                f" {tr.s[stage + '_seconds']:.0f} s in stage")
            sums, n, t_log = {}, 0, time.time()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--minutes", type=float, required=True, help="wall-clock budget of this call")
    ap.add_argument("--reserve", type=float, default=45, help="seconds kept for saving and samples")
    ap.add_argument("--config", default=os.path.join(tiny_sd1.HERE, "config.json"))
    ap.add_argument("--set", action="append", default=[], help="override, e.g. unet_train.batch=8")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", help="also copy compact.pt (in 15 MiB parts), log and previews here")
    ap.add_argument("--export", metavar="PATH", help="only export the run's state to PATH (+ .yaml)")
    ap.add_argument("--init-from", metavar="PATH", help="a fresh run starts from this exported checkpoint "
                    "at the UNet stage (Note [fine-tuning]); ignored when the run dir has a resume state")
    args = ap.parse_args()
    start = time.time()
    cfg = tiny_sd1.load_config(args.config)
    for item in args.set:
        key, value = item.split("=", 1)
        sect, name = key.split(".")
        cfg[sect][name] = type(cfg[sect][name])(value) if cfg[sect].get(name) is not None else float(value)
    os.makedirs(args.run_dir, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tr = Trainer(cfg, device, args.run_dir)
    resume = load_resume(args.run_dir)
    if resume is not None:
        tr.load(resume)
        if args.init_from:
            log(args.run_dir, f"resuming {args.run_dir}: --init-from ignored")
    elif args.init_from:
        tr.init_from(args.init_from)
    if args.export:
        export(tr, cfg, args.export)
        return 0
    if tr.s["stage"] == "vae" and "vae_train" not in cfg:
        ap.error(f"{args.config} has no vae_train stage: start the run with --init-from")
    log(args.run_dir, f"== chunk at stage {tr.s['stage']}, vae step {tr.s['vae_steps']}, unet step "
                      f"{tr.s['unet_steps']}, {args.minutes} min, device {device}")
    try:
        chunk(tr, args, cfg, start)
    finally:
        if args.out:
            copy_out(args.run_dir, args.out)


def chunk(tr, args, cfg, start):
    train(tr, start + 60 * args.minutes - args.reserve)
    tr.save()
    export(tr, cfg, os.path.join(args.run_dir, CKPT))
    if tr.s["stage"] == "dec":
        tr.vae_preview(os.path.join(tr.run_dir, "vae.png"))
    if tr.s["stage"] in ("unet", "dec"):
        tr.preview(os.path.join(args.run_dir, "samples.png"))
    log(args.run_dir, f"== saved at vae step {tr.s['vae_steps']}, unet step {tr.s['unet_steps']} "
                      f"after {time.time() - start:.0f} s")


def export(tr, cfg, path):
    steps = {f"headroom.train.{k}_steps": str(tr.s.get(k + "_steps", 0)) for k in ("vae", "unet", "dec")}
    if "init_from" in tr.s:
        steps["headroom.train.init_from"] = json.dumps(tr.s["init_from"], sort_keys=True)
    tiny_sd1.export(path, tr.ema_models(), cfg, steps)


def load_resume(run_dir):
    for name in ("state.pt", "compact.pt"):
        path = os.path.join(run_dir, name)
        if not os.path.exists(path) and os.path.exists(path + ".00"):
            join_parts(path)
        if os.path.exists(path):
            try:
                return torch.load(path, map_location="cpu", weights_only=False)
            except TypeError:  # torch < 1.13
                return torch.load(path, map_location="cpu")
    return None


def join_parts(path):
    with open(path, "wb") as out:
        i = 0
        while os.path.exists(f"{path}.{i:02d}"):
            with open(f"{path}.{i:02d}", "rb") as f:
                out.write(f.read())
            i += 1


def copy_out(run_dir, out):
    os.makedirs(out, exist_ok=True)
    data = b""
    if os.path.exists(os.path.join(run_dir, "compact.pt")):
        with open(os.path.join(run_dir, "compact.pt"), "rb") as f:
            data = f.read()
    part = 15 << 20
    for i in range(0, len(data), part):
        with open(os.path.join(out, f"compact.pt.{i // part:02d}"), "wb") as f:
            f.write(data[i:i + part])
    for name in ("log.txt", "samples.png", "vae.png"):
        if os.path.exists(os.path.join(run_dir, name)):
            shutil.copy(os.path.join(run_dir, name), out)


if __name__ == "__main__":
    sys.exit(main())
