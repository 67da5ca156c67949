#!/usr/bin/python3
"""Reference tensors for Flux sampling (tests/sampling/flux_sampling_test.cpp), computed with
ComfyUI's own code.

Usage: /usr/bin/python3 make_sampling_golden.py <torchsde checkout> <ComfyUI checkout> <out.safetensors>

Needs torch 1.13 (Debian's python3-torch), numpy and scipy. Imports comfy.model_sampling,
comfy.latent_formats and comfy.k_diffusion.sampling unchanged, with stubs for the modules these
paths never run (tqdm, comfy.model_patcher, comfy.ldm...util used only by the discrete schedule,
the `trampoline` package torchsde needs). The schedulers (comfy/samplers.py), ComfyUI's
ModelSamplingFlux node (comfy_extras/nodes_model_advanced.py) and the Flux / FluxSchnell
sampling settings (comfy/supported_models.py) are taken out of their files by name with `ast`,
since those files import ComfyUI's whole dependency tree. Nothing is restated here except
KSAMPLER.sample's three lines (noise_scaling, the sampler, inverse_noise_scaling) and the toy
network. See README.md.
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


def stub_modules():
    tramp = types.ModuleType("trampoline")

    class TailCall(BaseException):
        def __init__(self, call):
            super().__init__()
            self.call = call

    def trampoline(gen):
        stack, value = [gen], None
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

    tramp.TailCall, tramp.trampoline = TailCall, trampoline
    sys.modules["trampoline"] = tramp
    tqdm = types.ModuleType("tqdm")
    tqdm_auto = types.ModuleType("tqdm.auto")
    tqdm_auto.trange = lambda n, disable=None: range(n)
    tqdm_auto.tqdm = lambda it=None, **kw: it
    tqdm.auto = tqdm_auto
    sys.modules["tqdm"], sys.modules["tqdm.auto"] = tqdm, tqdm_auto
    sys.modules["comfy.model_patcher"] = types.ModuleType("comfy.model_patcher")
    util = types.ModuleType("comfy.ldm.modules.diffusionmodules.util")
    util.make_beta_schedule = None  # only the discrete schedule calls it
    for name in ["comfy.ldm", "comfy.ldm.modules", "comfy.ldm.modules.diffusionmodules"]:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["comfy.ldm.modules.diffusionmodules.util"] = util


def picked_from(path, names, ns, kind=ast.FunctionDef):
    tree = ast.parse(open(path).read())
    picked = [n for n in tree.body if isinstance(n, kind) and n.name in names]
    for n in picked:
        if isinstance(n, ast.FunctionDef):
            n.decorator_list = []
    missing = set(names) - {n.name for n in picked}
    assert not missing, f"{path} lacks {missing}"
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    return ns


def class_dict_literal(path, cls, attr):
    """The literal value of `attr` in class `cls` of `path` (ComfyUI's sampling_settings)."""
    for n in ast.parse(open(path).read()).body:
        if isinstance(n, ast.ClassDef) and n.name == cls:
            for s in n.body:
                if isinstance(s, ast.Assign) and s.targets[0].id == attr:
                    return ast.literal_eval(s.value)
    raise KeyError(f"{cls}.{attr}")


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = numpy.ascontiguousarray(torch.as_tensor(tensors[name]).detach().cpu().numpy().astype("<f4"))
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


class FakePatcher:
    """What the ModelSamplingFlux node and the samplers ask of a ModelPatcher."""

    def __init__(self, model_sampling, model_config=None):
        self.ms = model_sampling
        self.model = types.SimpleNamespace(model_config=model_config)
        self.patches = {}

    def clone(self):
        c = FakePatcher(self.ms, self.model.model_config)
        return c

    def add_object_patch(self, name, obj):
        self.patches[name] = obj

    def get_model_object(self, name):
        assert name == "model_sampling"
        return self.ms


class ToyModel:
    """KSamplerX0Inpaint's interface over a toy network: raw = 0.5 * calculate_input(x) +
    bias * timestep(sigma), denoised = calculate_denoised(sigma, raw, x) (BaseModel._apply_model
    without the network)."""

    def __init__(self, ms, bias):
        self.ms, self.bias = ms, bias
        patcher = FakePatcher(ms)
        self.inner_model = types.SimpleNamespace(inner_model=types.SimpleNamespace(model_sampling=ms),
                                                 model_patcher=patcher)

    def __call__(self, x, sigma, **kwargs):
        t = self.ms.timestep(sigma).float()
        raw = 0.5 * self.ms.calculate_input(sigma, x) + self.bias * t.reshape(())
        return self.ms.calculate_denoised(sigma, raw, x)


def main(torchsde_dir, root, out_path):
    stub_modules()
    sys.path.insert(0, torchsde_dir)
    sys.path.insert(0, root)
    import comfy
    import comfy.model_sampling as MS
    import comfy.latent_formats as LF
    import comfy.k_diffusion.sampling as K
    comfy.model_patcher = sys.modules["comfy.model_patcher"]

    ns = {"torch": torch, "math": math, "numpy": numpy, "scipy": scipy}
    picked_from(f"{root}/comfy/samplers.py",
                ["simple_scheduler", "ddim_scheduler", "normal_scheduler", "beta_scheduler",
                 "linear_quadratic_schedule", "kl_optimal_scheduler"], ns)
    node_ns = {"comfy": comfy, "nodes": types.SimpleNamespace(MAX_RESOLUTION=16384)}
    picked_from(f"{root}/comfy_extras/nodes_model_advanced.py", ["ModelSamplingFlux"], node_ns,
                kind=ast.ClassDef)
    sm = f"{root}/comfy/supported_models.py"
    dev_cfg = types.SimpleNamespace(sampling_settings=class_dict_literal(sm, "Flux", "sampling_settings"))
    schnell_cfg = types.SimpleNamespace(
        sampling_settings=class_dict_literal(sm, "FluxSchnell", "sampling_settings"))

    def node_flux(max_shift, base_shift, width, height):
        m = node_ns["ModelSamplingFlux"]().patch(FakePatcher(None, dev_cfg), max_shift, base_shift,
                                                 width, height)[0]
        return m.patches["model_sampling"]

    # model_base.model_sampling(config, ModelType.FLUX / FLOW): the schedule class and CONST.
    class FluxDev(MS.ModelSamplingFlux, MS.CONST):
        pass

    class FluxSchnell(MS.ModelSamplingDiscreteFlow, MS.CONST):
        pass

    cases = {
        "dev": FluxDev(dev_cfg),                 # the family default (shift 1.15)
        "schnell": FluxSchnell(schnell_cfg),     # shift 1, multiplier 1
        "node1024": node_flux(1.15, 0.5, 1024, 1024),
        "node512x768": node_flux(1.15, 0.5, 512, 768),
        "node1920x1088": node_flux(2.0, 0.25, 1920, 1088),
    }
    t = {}
    torch.manual_seed(20261203)
    for tag, m in cases.items():
        t[f"{tag}.shift"] = torch.tensor([float(m.shift)])
        n = len(m.sigmas)
        idx = torch.cat([torch.arange(0, n, 97), torch.tensor([n - 2, n - 1])])
        t[f"{tag}.table_len"] = torch.tensor([float(n)])
        t[f"{tag}.table_idx"] = idx.float()
        t[f"{tag}.table"] = m.sigmas[idx]
        probe = torch.tensor([0.0001, 0.0291, 0.25, 0.5, 0.7316, 0.999, 1.0])
        t[f"{tag}.probe"] = probe
        t[f"{tag}.timestep"] = m.timestep(probe)
        t[f"{tag}.sigma_of_t"] = m.sigma(probe)
        pct = [0.0, 1e-4, 0.1, 0.25, 0.5, 0.875, 1.0]
        t[f"{tag}.percent"] = torch.tensor(pct, dtype=torch.float32)
        t[f"{tag}.percent_to_sigma"] = torch.tensor([float(m.percent_to_sigma(p)) for p in pct])
        smin, smax = float(m.sigma_min), float(m.sigma_max)
        for steps in [1, 4, 20]:
            t[f"{tag}.simple.{steps}"] = ns["simple_scheduler"](m, steps)
            t[f"{tag}.normal.{steps}"] = ns["normal_scheduler"](m, steps)
            t[f"{tag}.sgm_uniform.{steps}"] = ns["normal_scheduler"](m, steps, sgm=True)
            t[f"{tag}.ddim_uniform.{steps}"] = ns["ddim_scheduler"](m, steps)
            t[f"{tag}.beta.{steps}"] = ns["beta_scheduler"](m, steps)
            t[f"{tag}.linear_quadratic.{steps}"] = ns["linear_quadratic_schedule"](m, steps)
            t[f"{tag}.karras.{steps}"] = K.get_sigmas_karras(n=steps, sigma_min=smin, sigma_max=smax)
            t[f"{tag}.exponential.{steps}"] = K.get_sigmas_exponential(n=steps, sigma_min=smin, sigma_max=smax)
            t[f"{tag}.kl_optimal.{steps}"] = ns["kl_optimal_scheduler"](n=steps, sigma_min=smin, sigma_max=smax)

    # CONST arithmetic under ModelSamplingFlux and the Flux latent format.
    m = cases["node1024"]
    shape = [1, 16, 3, 3]
    x, noise, out = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    sigma = torch.tensor([0.7071])
    t.update({"const.x": x, "const.noise": noise, "const.out": out, "const.sigma": sigma})
    t["const.input"] = m.calculate_input(sigma, x)
    t["const.denoised"] = m.calculate_denoised(sigma, out, x)
    t["const.noised"] = m.noise_scaling(sigma, noise, x)
    t["const.inverse"] = m.inverse_noise_scaling(sigma, x)
    fmt = LF.Flux()
    t["latent.scale_factor"] = torch.tensor([fmt.scale_factor])
    t["latent.shift_factor"] = torch.tensor([fmt.shift_factor])
    t["latent.rgb_factors"] = torch.tensor(fmt.latent_rgb_factors)
    t["latent.rgb_bias"] = torch.tensor(fmt.latent_rgb_factors_bias)
    t["latent.in"] = fmt.process_in(x)
    t["latent.out"] = fmt.process_out(x)

    # KSAMPLER.sample on the toy network: x = noise_scaling(sigmas[0], noise, latent,
    # max_denoise); sampler; inverse_noise_scaling(sigmas[-1]). "full": simple(6) from sigma 1;
    # "part": the last 5 of simple(8) (denoise < 1), from a latent.
    bias = torch.randn(shape) * 0.3
    latent = torch.randn(shape) * 0.5
    t["traj.bias"], t["traj.latent"] = bias, latent
    seed = 12345
    t["traj.seed"] = torch.tensor([float(seed)])
    model = ToyModel(m, bias)
    scheds = {"full": ns["simple_scheduler"](m, 6), "part": ns["simple_scheduler"](m, 8)[-6:]}
    for sname, sigmas in scheds.items():
        t[f"traj.{sname}.sigmas"] = sigmas
        max_sigma, s0 = float(m.sigma_max), float(sigmas[0])
        max_denoise = math.isclose(max_sigma, s0, rel_tol=1e-05) or s0 > max_sigma
        x0 = m.noise_scaling(sigmas[0], noise, latent, max_denoise)
        t[f"traj.{sname}.start"] = x0
        for sampler in ["euler", "euler_ancestral", "heun", "dpm_2", "dpm_2_ancestral", "lms",
                        "dpmpp_2s_ancestral", "dpmpp_sde", "dpmpp_2m", "dpmpp_2m_sde", "ddpm",
                        "lcm"]:
            fn = getattr(K, "sample_" + sampler)
            xs = []
            samples = fn(model, x0.clone(), sigmas.clone(), extra_args={"seed": seed},
                         callback=lambda d: xs.append(d["x"].clone()), disable=True)
            samples = m.inverse_noise_scaling(sigmas[-1], samples)
            t[f"traj.{sname}.{sampler}.x_steps"] = torch.stack(xs)
            t[f"traj.{sname}.{sampler}.end"] = samples
            print(sname, sampler, float(samples.abs().mean()))
    write_safetensors(out_path, t)
    print(f"wrote {len(t)} tensors to {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
