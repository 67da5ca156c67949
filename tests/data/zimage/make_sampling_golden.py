#!/usr/bin/python3
"""Reference tensors for Z-Image sampling (tests/sampling/zimage_sampling_test.cpp), computed with
ComfyUI's own code: the ModelSamplingAuraFlow / ModelSamplingSD3 nodes' model sampling, the
simple scheduler on it, and the res_multistep samplers on a toy network.

Usage: /usr/bin/python3 make_sampling_golden.py <torchsde checkout> <ComfyUI checkout> <out.safetensors>

Reuses tests/data/flux/make_sampling_golden.py (its module stubs, the `ast` picking of classes and
functions out of files that import ComfyUI's whole tree, the safetensors writer, the fake
ModelPatcher and the toy network). Nothing is restated here except KSAMPLER.sample's three lines
(noise_scaling, the sampler, inverse_noise_scaling). See README.md.
"""
import math
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "flux"))
import make_sampling_golden as flux  # noqa: E402

SAMPLERS = ["res_multistep", "res_multistep_ancestral"]


def node_model_sampling(node_ns, cls, shift):
    """The model_sampling object patch of ComfyUI's ModelSamplingAuraFlow / ModelSamplingSD3."""
    patcher = flux.FakePatcher(None, types.SimpleNamespace(sampling_settings={}))
    node = node_ns[cls]()
    m = node.patch_aura(patcher, shift)[0] if cls == "ModelSamplingAuraFlow" else node.patch(patcher, shift)[0]
    return m.patches["model_sampling"]


def main(torchsde_dir, root, out_path):
    flux.stub_modules()
    sys.path.insert(0, torchsde_dir)
    sys.path.insert(0, root)
    import comfy
    import comfy.model_sampling  # noqa: F401  (the nodes' module reads comfy.model_sampling)
    import comfy.k_diffusion.sampling as K
    comfy.model_patcher = sys.modules["comfy.model_patcher"]

    ns = {"torch": torch, "math": math}
    flux.picked_from(f"{root}/comfy/samplers.py", ["simple_scheduler"], ns)
    node_ns = {"comfy": comfy, "nodes": types.SimpleNamespace(MAX_RESOLUTION=16384)}
    flux.picked_from(f"{root}/comfy_extras/nodes_model_advanced.py",
                     ["ModelSamplingSD3", "ModelSamplingAuraFlow"], node_ns, kind=flux.ast.ClassDef)

    cases = {
        "aura3": node_model_sampling(node_ns, "ModelSamplingAuraFlow", 3.0),  # the Z-Image template
        "aura173": node_model_sampling(node_ns, "ModelSamplingAuraFlow", 1.73),  # the node default
        "sd3": node_model_sampling(node_ns, "ModelSamplingSD3", 3.0),
    }
    t = {}
    torch.manual_seed(20261204)
    for tag, m in cases.items():
        t[f"{tag}.shift"] = torch.tensor([float(m.shift)])
        t[f"{tag}.multiplier"] = torch.tensor([float(m.multiplier)])
        n = len(m.sigmas)
        idx = torch.cat([torch.arange(0, n, 37), torch.tensor([n - 2, n - 1])])
        t[f"{tag}.table_len"] = torch.tensor([float(n)])
        t[f"{tag}.table_idx"] = idx.float()
        t[f"{tag}.table"] = m.sigmas[idx]
        probe = torch.tensor([0.0001, 0.0291, 0.25, 0.5, 0.7316, 0.999, 1.0])
        t[f"{tag}.probe"] = probe
        t[f"{tag}.timestep"] = m.timestep(probe)
        t[f"{tag}.sigma_of_t"] = m.sigma(probe * float(m.multiplier))
        pct = [0.0, 1e-4, 0.1, 0.25, 0.5, 0.875, 1.0]
        t[f"{tag}.percent"] = torch.tensor(pct, dtype=torch.float32)
        t[f"{tag}.percent_to_sigma"] = torch.tensor([float(m.percent_to_sigma(p)) for p in pct])
        for steps in [1, 8, 20]:
            t[f"{tag}.simple.{steps}"] = ns["simple_scheduler"](m, steps)

    # KSAMPLER.sample on the toy network under ModelSamplingAuraFlow(shift 3): x =
    # noise_scaling(sigmas[0], noise, latent, max_denoise); sampler; inverse_noise_scaling.
    # "full": simple(8) from sigma 1; "part": the last 5 sigmas of simple(8) (denoise < 1).
    m = cases["aura3"]
    shape = [1, 16, 3, 3]
    noise = torch.randn(shape)
    bias = torch.randn(shape) * 0.3
    latent = torch.randn(shape) * 0.5
    t["traj.noise"], t["traj.bias"], t["traj.latent"] = noise, bias, latent
    seed = 4242
    t["traj.seed"] = torch.tensor([float(seed)])
    model = flux.ToyModel(m, bias)
    full = ns["simple_scheduler"](m, 8)
    for sname, sigmas in {"full": full, "part": full[-5:]}.items():
        t[f"traj.{sname}.sigmas"] = sigmas
        max_sigma, s0 = float(m.sigma_max), float(sigmas[0])
        max_denoise = math.isclose(max_sigma, s0, rel_tol=1e-05) or s0 > max_sigma
        x0 = m.noise_scaling(sigmas[0], noise, latent, max_denoise)
        t[f"traj.{sname}.start"] = x0
        for sampler in SAMPLERS:
            fn = getattr(K, "sample_" + sampler)
            xs, ds = [], []

            def callback(d):
                xs.append(d["x"].clone())
                ds.append(d["denoised"].clone())

            samples = fn(model, x0.clone(), sigmas.clone(), extra_args={"seed": seed},
                         callback=callback, disable=True)
            samples = m.inverse_noise_scaling(sigmas[-1], samples)
            t[f"traj.{sname}.{sampler}.x_steps"] = torch.stack(xs)
            t[f"traj.{sname}.{sampler}.denoised_steps"] = torch.stack(ds)
            t[f"traj.{sname}.{sampler}.end"] = samples
            print(sname, sampler, float(samples.abs().mean()))
    flux.write_safetensors(out_path, t)
    print(f"wrote {len(t)} tensors to {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
