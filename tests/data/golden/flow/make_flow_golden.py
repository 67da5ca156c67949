#!/usr/bin/python3
"""Reference tensors for flow-matching model sampling (tests/sampling/flow_sampling_test.cpp),
computed with ComfyUI's own code.

Usage: /usr/bin/python3 make_flow_golden.py <ComfyUI checkout> <out.safetensors>

Needs torch (Debian's python3-torch), numpy and scipy. Loads comfy/model_sampling.py as a module
(its one import of comfy.ldm...util, used only by the discrete schedule, is stubbed) and takes
the schedulers (comfy/samplers.py), the sigma helpers and Euler sampler
(comfy/k_diffusion/sampling.py) and append_dims (comfy/k_diffusion/utils.py) out of their files by name with `ast`, because those files
import ComfyUI's whole dependency tree. Nothing is restated here. See README.md.
"""
import ast
import json
import math
import struct
import sys
import types

import numpy
import scipy.stats
import torch


def load_model_sampling(root):
    util = types.ModuleType("comfy.ldm.modules.diffusionmodules.util")
    util.make_beta_schedule = None  # only the discrete schedule calls it
    for name in ["comfy", "comfy.ldm", "comfy.ldm.modules", "comfy.ldm.modules.diffusionmodules"]:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["comfy.ldm.modules.diffusionmodules.util"] = util
    ns = {"__name__": "comfy.model_sampling"}
    src = open(f"{root}/comfy/model_sampling.py").read()
    exec(compile(src, "comfy/model_sampling.py", "exec"), ns)
    return types.SimpleNamespace(**ns)


def functions_from(path, names, ns):
    tree = ast.parse(open(path).read())
    picked = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    for n in picked:
        n.decorator_list = []  # @torch.no_grad() is irrelevant here
    missing = set(names) - {n.name for n in picked}
    assert not missing, f"{path} lacks {missing}"
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    return ns


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = numpy.ascontiguousarray(tensors[name].detach().cpu().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def flow_sampling(ms_mod, shift, multiplier):
    class Flow(ms_mod.ModelSamplingDiscreteFlow, ms_mod.CONST):
        pass
    m = Flow()
    m.set_parameters(shift=shift, multiplier=multiplier)
    return m


def main(root, out_path):
    ms_mod = load_model_sampling(root)
    ns = {"torch": torch, "math": math, "numpy": numpy, "scipy": scipy}
    functions_from(f"{root}/comfy/samplers.py",
                   ["simple_scheduler", "ddim_scheduler", "normal_scheduler", "beta_scheduler",
                    "linear_quadratic_schedule", "kl_optimal_scheduler"], ns)
    ns["trange"] = lambda n, disable=None: range(n)
    ns["utils"] = types.SimpleNamespace(
        **functions_from(f"{root}/comfy/k_diffusion/utils.py", ["append_dims"], {"torch": torch}))
    functions_from(f"{root}/comfy/k_diffusion/sampling.py",
                   ["append_zero", "get_sigmas_karras", "get_sigmas_exponential", "to_d",
                    "sample_euler"], ns)
    t = {}
    torch.manual_seed(20261203)
    for tag, shift, mult in [("s3", 3.0, 1000), ("s1", 1.0, 1000), ("s6m1", 6.0, 1.0)]:
        m = flow_sampling(ms_mod, shift, mult)
        t[f"{tag}.sigmas"] = m.sigmas
        probe = torch.tensor([0.001, 0.0291, 0.25, 0.5, 0.7316, 0.999, 1.0])
        t[f"{tag}.probe_sigma"] = probe
        t[f"{tag}.timestep"] = m.timestep(probe)
        ts = probe * mult
        t[f"{tag}.probe_t"] = ts
        t[f"{tag}.sigma_of_t"] = m.sigma(ts)
        pct = [0.0, 0.1, 0.25, 0.5, 0.875, 1.0]
        t[f"{tag}.percent"] = torch.tensor(pct, dtype=torch.float32)
        t[f"{tag}.percent_to_sigma"] = torch.tensor([float(m.percent_to_sigma(p)) for p in pct])
        smin, smax = float(m.sigma_min), float(m.sigma_max)
        for steps in [1, 4, 9]:
            t[f"{tag}.simple.{steps}"] = ns["simple_scheduler"](m, steps)
            t[f"{tag}.normal.{steps}"] = ns["normal_scheduler"](m, steps)
            t[f"{tag}.sgm_uniform.{steps}"] = ns["normal_scheduler"](m, steps, sgm=True)
            t[f"{tag}.ddim_uniform.{steps}"] = ns["ddim_scheduler"](m, steps)
            t[f"{tag}.beta.{steps}"] = ns["beta_scheduler"](m, steps)
            t[f"{tag}.linear_quadratic.{steps}"] = ns["linear_quadratic_schedule"](m, steps)
            t[f"{tag}.karras.{steps}"] = ns["get_sigmas_karras"](n=steps, sigma_min=smin, sigma_max=smax)
            t[f"{tag}.exponential.{steps}"] = ns["get_sigmas_exponential"](n=steps, sigma_min=smin, sigma_max=smax)
            t[f"{tag}.kl_optimal.{steps}"] = ns["kl_optimal_scheduler"](n=steps, sigma_min=smin, sigma_max=smax)
    # CONST arithmetic on fresh tensors at one sigma, and an Euler trajectory of a toy network
    # (out = 0.5 x_in + 0.1 noise-like constant) through ComfyUI's calculate_denoised.
    m = flow_sampling(ms_mod, 3.0, 1000)
    x = torch.randn(1, 4, 3, 5)
    noise = torch.randn(1, 4, 3, 5)
    out = torch.randn(1, 4, 3, 5)
    sigma = torch.tensor([0.6180339])
    t["const.x"], t["const.noise"], t["const.out"], t["const.sigma"] = x, noise, out, sigma
    t["const.input"] = m.calculate_input(sigma, x)
    t["const.denoised"] = m.calculate_denoised(sigma, out, x)
    t["const.noised"] = m.noise_scaling(sigma, noise, x)
    t["const.inverse"] = m.inverse_noise_scaling(sigma, x)
    bias = torch.randn(1, 4, 3, 5) * 0.1
    t["euler.bias"] = bias

    def model(xx, s):
        raw = 0.5 * m.calculate_input(s, xx) + bias
        return m.calculate_denoised(s, raw, xx)

    sigmas = ns["simple_scheduler"](m, 6)
    x0 = m.noise_scaling(sigmas[0], noise, x)
    t["euler.sigmas"] = sigmas
    t["euler.start"] = x0
    t["euler.end"] = m.inverse_noise_scaling(sigmas[-1], ns["sample_euler"](model, x0, sigmas))
    write_safetensors(out_path, t)
    print(f"wrote {len(t)} tensors to {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
