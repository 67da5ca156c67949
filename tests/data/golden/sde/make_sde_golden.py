#!/usr/bin/python3
# Makes golden-sde.safetensors: ComfyUI's Brownian-tree noise (torchsde.BrownianTree) and the
# dpmpp_sde / dpmpp_2m_sde trajectories, from the torchsde and ComfyUI sources themselves.
#
#   /usr/bin/python3 make_sde_golden.py <torchsde checkout> <ComfyUI checkout> [out]
#
# Needs torch and numpy only. Modules the two code bases import but these paths never run
# (scipy, tqdm, comfy.model_patcher, comfy.model_sampling) are stubbed; `trampoline` (a torchsde
# dependency that is not installed) gets a minimal implementation of its two names.
import json
import struct
import sys
import types

import numpy as np
import torch


def stub_modules():
    tramp = types.ModuleType("trampoline")

    class TailCall(BaseException):
        def __init__(self, call):
            super().__init__()
            self.call = call

    def trampoline(gen):
        # Runs nested generators without Python recursion: a generator yields the generator it
        # waits on, returns its value, or raises TailCall to be replaced by another.
        stack = [gen]
        value = None
        while stack:
            try:
                nxt = stack[-1].send(value)
                stack.append(nxt)
                value = None
            except StopIteration as e:
                stack.pop()
                value = e.value
            except TailCall as t:
                stack.pop()
                stack.append(t.call)
                value = None
        return value

    tramp.TailCall = TailCall
    tramp.trampoline = trampoline
    sys.modules["trampoline"] = tramp

    scipy = types.ModuleType("scipy")
    scipy.integrate = types.ModuleType("scipy.integrate")
    sys.modules["scipy"] = scipy
    sys.modules["scipy.integrate"] = scipy.integrate

    tqdm = types.ModuleType("tqdm")
    tqdm_auto = types.ModuleType("tqdm.auto")
    tqdm_auto.trange = lambda n, disable=None: range(n)
    tqdm_auto.tqdm = lambda it=None, **kw: it
    tqdm.auto = tqdm_auto
    sys.modules["tqdm"] = tqdm
    sys.modules["tqdm.auto"] = tqdm_auto

    patcher = types.ModuleType("comfy.model_patcher")
    sys.modules["comfy.model_patcher"] = patcher
    ms = types.ModuleType("comfy.model_sampling")

    class CONST:  # flow models; the EPS models here are not
        pass

    class EPS:
        pass

    ms.CONST = CONST
    ms.EPS = EPS
    sys.modules["comfy.model_sampling"] = ms


class FakePatcher:
    def get_model_object(self, name):
        assert name == "model_sampling"
        return sys.modules["comfy.model_sampling"].EPS()


class AnalyticModel:
    """denoised = x * (0.5 / (1 + sigma^2)) + 0.1 * (0.5 / (1 + sigma^2)), in float32."""

    def __init__(self):
        self.inner_model = types.SimpleNamespace(model_patcher=FakePatcher())

    def __call__(self, x, sigma, **kwargs):
        s = sigma[0].reshape(())
        k = torch.div(torch.tensor(0.5, dtype=torch.float32), torch.add(s * s, 1.0))
        return x * k + k * 0.1


def write_safetensors(path, tensors):
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    torchsde_dir, comfy_dir = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) > 3 else "golden-sde.safetensors"
    stub_modules()
    sys.path.insert(0, torchsde_dir)
    sys.path.insert(0, comfy_dir)
    import comfy
    import comfy.k_diffusion.sampling as K

    comfy.model_sampling = sys.modules["comfy.model_sampling"]  # a stub is not set on its parent
    comfy.model_patcher = sys.modules["comfy.model_patcher"]

    # Every noise_sampler(sigma, sigma_next) call the samplers make, with its result and the raw
    # tree increment tree(lo, hi) behind it.
    calls = []

    class Recorder(K.BrownianTreeNoiseSampler):
        def __call__(self, sigma, sigma_next):
            out = super().__call__(sigma, sigma_next)
            lo, hi = sorted([float(sigma), float(sigma_next)])
            raw = self.tree.trees[0](torch.tensor(lo), torch.tensor(hi))
            calls.append((float(sigma), float(sigma_next), out.clone(), raw.clone()))
            return out

    K.BrownianTreeNoiseSampler = Recorder

    cases = [  # name, shape, seed, steps
        ("s0", [1, 4, 8, 8], 0, 8),
        ("s42", [1, 4, 8, 8], 42, 6),
        ("sbig", [1, 4, 8, 8], 2**63 + 12345, 6),
        ("b2", [2, 4, 6, 5], 2**40 + 7, 6),
    ]
    g = {}
    model = AnalyticModel()
    for name, shape, seed, steps in cases:
        sigmas = K.get_sigmas_karras(steps, 0.0291675, 14.614642)
        x0 = torch.randn(shape, generator=torch.Generator().manual_seed(7)) * sigmas[0]
        g[f"{name}.sigmas"] = sigmas
        g[f"{name}.x_init"] = x0
        g[f"{name}.seed_words"] = torch.tensor([seed & 0xFFFF, (seed >> 16) & 0xFFFF,
                                                (seed >> 32) & 0xFFFF, (seed >> 48) & 0xFFFF],
                                               dtype=torch.float32)
        for sampler in ("dpmpp_sde", "dpmpp_2m_sde"):
            fn = getattr(K, "sample_" + sampler)
            calls.clear()
            xs = []
            final = fn(model, x0.clone(), sigmas, extra_args={"seed": seed},
                       callback=lambda d: xs.append(d["x"].clone()), disable=True)
            key = f"{name}.{sampler}"
            g[key + ".final"] = final
            g[key + ".x_steps"] = torch.stack(xs)
            g[key + ".query"] = torch.tensor([[c[0], c[1]] for c in calls], dtype=torch.float32)
            g[key + ".noise"] = torch.stack([c[2] for c in calls])
            g[key + ".raw"] = torch.stack([c[3] for c in calls])
            print(key, "queries", len(calls), "final abs mean", float(final.abs().mean()))
    write_safetensors(out, g)
    print("wrote", out)


if __name__ == "__main__":
    main()
