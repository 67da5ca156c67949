#!/usr/bin/python3
"""Reference results of ComfyUI's latent nodes for tests/workflow/nodes_latent_ops_test.cpp,
computed by the node classes themselves (nodes.py LatentComposite, LatentBlend, LatentCrop,
LatentFlip, LatentRotate, LatentFromBatch, RepeatLatentBatch; comfy_extras/nodes_latent.py
LatentAdd, LatentSubtract, LatentMultiply, LatentBatch; comfy_extras/nodes_mask.py
LatentCompositeMasked), with their declared inputs for /object_info.

Usage: /usr/bin/python3 make_latent_golden.py <ComfyUI checkout> <out.safetensors>

Needs torch and numpy only. The checkout needs nodes.py, comfy/{utils,cli_args,options,
checkpoint_pickle}.py and comfy_extras/nodes_{latent,mask}.py; everything else those import
(the samplers, model management, PIL, safetensors, scipy, comfy_api) is stubbed: none of it
is called by these nodes. comfy_api's `io` stub records the V3 schemas and returns
NodeOutput's values. See README.md for the file's layout.
"""
import json
import struct
import sys
import types

import numpy as np
import torch


class Anything:
    """Stands for any name a stubbed module exports: attribute, call, base class."""

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return Anything()

    def __call__(self, *a, **k):
        return Anything()

    def __mro_entries__(self, bases):
        return (object,)


def stub_module(name, **attrs):
    m = types.ModuleType(name)
    m.__getattr__ = lambda n: Anything()
    m.__path__ = []  # a package, so that submodules resolve
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def io_stub():
    """comfy_api.latest.io: ComfyNode is a plain base; Schema and the inputs record what the
    V3 nodes declare; NodeOutput keeps the node's results."""

    class NodeOutput:
        def __init__(self, *values):
            self.values = values

    def input_type(type_name):
        class T:
            @staticmethod
            def Input(id, optional=False, **opts):
                return {"id": id, "type": type_name, "optional": optional, "opts": opts}

            @staticmethod
            def Output(*a, **k):
                return type_name

        return T

    class Combo:
        @staticmethod
        def Input(id, options=(), optional=False, **opts):
            return {"id": id, "type": list(options), "optional": optional, "opts": opts}

    io = types.SimpleNamespace(
        ComfyNode=object, NodeOutput=NodeOutput, Schema=lambda **k: k, Combo=Combo,
        Latent=input_type("LATENT"), Float=input_type("FLOAT"), Int=input_type("INT"),
        Boolean=input_type("BOOLEAN"), Mask=input_type("MASK"), Image=input_type("IMAGE"))
    io.__getattr__ = lambda n: Anything()
    return io


def import_nodes(root):
    sys.path.insert(0, root)
    for name in ["safetensors", "safetensors.torch", "einops", "PIL", "PIL.Image", "PIL.ImageOps",
                 "PIL.ImageSequence", "PIL.PngImagePlugin", "scipy", "scipy.ndimage"]:
        stub_module(name)
    import comfy.cli_args
    comfy.cli_args.args.cpu = True
    import comfy.utils  # the real one: common_upscale, repeat_to_batch_size
    for name in ["comfy.diffusers_load", "comfy.samplers", "comfy.sample", "comfy.sd",
                 "comfy.controlnet", "comfy.comfy_types", "comfy.clip_vision",
                 "comfy.model_management", "comfy_api", "comfy_api.internal",
                 "comfy_api.version_list", "folder_paths", "latent_preview", "node_helpers",
                 "comfy_extras.nodes_post_processing"]:
        stub_module(name)
    stub_module("comfy_api.latest", io=io_stub(), ComfyExtension=object)
    import nodes
    import comfy_extras.nodes_latent as nodes_latent
    import comfy_extras.nodes_mask as nodes_mask
    return nodes, nodes_latent, nodes_mask


def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy().astype("<f4"))
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


def v1_info(cls, display_names):
    """The /object_info fields the C++ test checks, from a V1 node class."""
    it = cls.INPUT_TYPES()
    return {"input": {k: {n: list(v) for n, v in it[k].items()} for k in it},
            "input_order": {k: list(it[k].keys()) for k in it},
            "output": list(cls.RETURN_TYPES), "category": cls.CATEGORY,
            "display_name": display_names.get(cls.__name__, cls.__name__)}


def v3_info(cls):
    """The same fields from a V3 schema (comfy_api/latest/_io.py Schema.get_v1_info: inputs
    as [type, options], display_name the node id when the schema names none)."""
    s = cls.define_schema()
    info = {"input": {"required": {}}, "input_order": {"required": []}, "output": list(s["outputs"]),
            "category": s["category"], "display_name": s.get("display_name") or s["node_id"]}
    for i in s["inputs"]:
        group = "optional" if i["optional"] else "required"
        info["input"].setdefault(group, {})[i["id"]] = [i["type"], i["opts"]] if i["opts"] else [i["type"]]
        info["input_order"].setdefault(group, []).append(i["id"])
    return info


def run_node(cls, fn, kwargs):
    out = getattr(cls(), fn)(**kwargs) if fn != "execute" else cls.execute(**kwargs)
    return out.values[0] if hasattr(out, "values") else out[0]


def main():
    comfy_root, out_path = sys.argv[1], sys.argv[2]
    nodes, nl, nm = import_nodes(comfy_root)
    g = torch.Generator().manual_seed(20261204)
    tensors = {
        "in.a": torch.randn(2, 4, 6, 8, generator=g),
        "in.b": torch.randn(2, 4, 6, 8, generator=g),
        "in.c": torch.randn(1, 4, 4, 5, generator=g),
        "in.d": torch.randn(3, 4, 9, 7, generator=g),
        "in.e": torch.randn(1, 4, 9, 7, generator=g),
        "in.big": torch.randn(1, 4, 16, 20, generator=g),
        "in.c1": torch.randn(2, 1, 6, 8, generator=g),
        "in.mask": torch.rand(1, 20, 24, generator=g),
        "in.masks": torch.rand(2, 5, 7, generator=g),
        "in.nm1": torch.rand(1, 1, 6, 8, generator=g),
        "in.nm2": torch.rand(2, 1, 6, 8, generator=g),
    }
    # Latent inputs by name: samples plus the optional dict keys ComfyUI's nodes read.
    latents = {
        "a": {"samples": "in.a"}, "b": {"samples": "in.b"}, "c": {"samples": "in.c"},
        "d": {"samples": "in.d"}, "e": {"samples": "in.e"}, "big": {"samples": "in.big"},
        "c1": {"samples": "in.c1"},
        "a_nm2_bi": {"samples": "in.a", "noise_mask": "in.nm2", "batch_index": [3, 5]},
        "a_nm1": {"samples": "in.a", "noise_mask": "in.nm1"},
        "d_nm2_bi": {"samples": "in.d", "noise_mask": "in.nm2", "batch_index": [4, 7, 9]},
        "d_nm2": {"samples": "in.d", "noise_mask": "in.nm2"},
    }
    V1, V3 = "v1", "v3"
    node_classes = {
        "LatentComposite": (nodes.LatentComposite, "composite", V1),
        "LatentCompositeMasked": (nm.LatentCompositeMasked, "composite", V1),
        "LatentBlend": (nodes.LatentBlend, "blend", V1),
        "LatentCrop": (nodes.LatentCrop, "crop", V1),
        "LatentFlip": (nodes.LatentFlip, "flip", V1),
        "LatentRotate": (nodes.LatentRotate, "rotate", V1),
        "LatentFromBatch": (nodes.LatentFromBatch, "frombatch", V1),
        "RepeatLatentBatch": (nodes.RepeatLatentBatch, "repeat", V1),
        "LatentBatch": (nl.LatentBatch, "execute", V3),
        "LatentAdd": (nl.LatentAdd, "execute", V3),
        "LatentSubtract": (nl.LatentSubtract, "execute", V3),
        "LatentMultiply": (nl.LatentMultiply, "execute", V3),
    }
    # (case, node, latent links, mask links, literals)
    cases = [
        ("composite.paste", "LatentComposite", {"samples_to": "a", "samples_from": "c"}, {}, {"x": 16, "y": 8, "feather": 0}),
        ("composite.unaligned", "LatentComposite", {"samples_to": "a", "samples_from": "c"}, {}, {"x": 21, "y": 15, "feather": 0}),
        ("composite.overhang", "LatentComposite", {"samples_to": "a", "samples_from": "d"}, {}, {"x": 24, "y": 16, "feather": 0}),
        ("composite.feather", "LatentComposite", {"samples_to": "big", "samples_from": "c"}, {}, {"x": 40, "y": 32, "feather": 16}),
        ("composite.feather_corner", "LatentComposite", {"samples_to": "a_nm2_bi", "samples_from": "c"}, {}, {"x": 0, "y": 0, "feather": 16}),
        ("composite.feather_wide", "LatentComposite", {"samples_to": "big", "samples_from": "c"}, {}, {"x": 8, "y": 8, "feather": 64}),
        ("composite.feather_overhang", "LatentComposite", {"samples_to": "a", "samples_from": "e"}, {}, {"x": 16, "y": 8, "feather": 24}),
        ("composite.channels_broadcast", "LatentComposite", {"samples_to": "a", "samples_from": "c1"}, {}, {"x": 8, "y": 0, "feather": 0}),
        ("composite.batch_too_big", "LatentComposite", {"samples_to": "c", "samples_from": "a"}, {}, {"x": 0, "y": 0, "feather": 0}),
        ("composite.outside", "LatentComposite", {"samples_to": "a", "samples_from": "c"}, {}, {"x": 80, "y": 0, "feather": 0}),
        ("masked.plain", "LatentCompositeMasked", {"destination": "a", "source": "c"}, {}, {"x": 16, "y": 8, "resize_source": False}),
        ("masked.mask", "LatentCompositeMasked", {"destination": "a_nm1", "source": "c"}, {"mask": "in.mask"}, {"x": 24, "y": 8, "resize_source": False}),
        ("masked.resize", "LatentCompositeMasked", {"destination": "a", "source": "d"}, {"mask": "in.masks"}, {"x": 0, "y": 0, "resize_source": True}),
        ("masked.overhang", "LatentCompositeMasked", {"destination": "a", "source": "d"}, {"mask": "in.masks"}, {"x": 35, "y": 20, "resize_source": False}),
        ("masked.far", "LatentCompositeMasked", {"destination": "a", "source": "c"}, {}, {"x": 1000, "y": 1000, "resize_source": False}),
        ("blend.same", "LatentBlend", {"samples1": "a_nm1", "samples2": "b"}, {}, {"blend_factor": 0.3}),
        ("blend.resized", "LatentBlend", {"samples1": "a", "samples2": "e"}, {}, {"blend_factor": 0.65}),
        ("blend.batch_mismatch", "LatentBlend", {"samples1": "a", "samples2": "d"}, {}, {"blend_factor": 0.5}),
        ("crop.inside", "LatentCrop", {"samples": "big"}, {}, {"width": 64, "height": 96, "x": 16, "y": 24}),
        ("crop.clamped", "LatentCrop", {"samples": "big"}, {}, {"width": 128, "height": 64, "x": 200, "y": 100}),
        ("crop.small", "LatentCrop", {"samples": "a_nm2_bi"}, {}, {"width": 64, "height": 64, "x": 0, "y": 0}),
        ("flip.x", "LatentFlip", {"samples": "d"}, {}, {"flip_method": "x-axis: vertically"}),
        ("flip.y", "LatentFlip", {"samples": "d_nm2_bi"}, {}, {"flip_method": "y-axis: horizontally"}),
        ("rotate.none", "LatentRotate", {"samples": "d"}, {}, {"rotation": "none"}),
        ("rotate.90", "LatentRotate", {"samples": "d"}, {}, {"rotation": "90 degrees"}),
        ("rotate.180", "LatentRotate", {"samples": "d"}, {}, {"rotation": "180 degrees"}),
        ("rotate.270", "LatentRotate", {"samples": "d_nm2_bi"}, {}, {"rotation": "270 degrees"}),
        ("batch.same", "LatentBatch", {"samples1": "a_nm1", "samples2": "b"}, {}, {}),
        ("batch.resized", "LatentBatch", {"samples1": "a", "samples2": "d_nm2_bi"}, {}, {}),
        ("batch.channels", "LatentBatch", {"samples1": "a", "samples2": "c1"}, {}, {}),
        ("repeat.plain", "RepeatLatentBatch", {"samples": "a"}, {}, {"amount": 3}),
        ("repeat.extras", "RepeatLatentBatch", {"samples": "a_nm2_bi"}, {}, {"amount": 3}),
        ("repeat.mask1", "RepeatLatentBatch", {"samples": "a_nm1"}, {}, {"amount": 2}),
        ("from_batch.plain", "LatentFromBatch", {"samples": "d"}, {}, {"batch_index": 1, "length": 5}),
        ("from_batch.past_end", "LatentFromBatch", {"samples": "d"}, {}, {"batch_index": 7, "length": 2}),
        ("from_batch.extras", "LatentFromBatch", {"samples": "d_nm2_bi"}, {}, {"batch_index": 1, "length": 2}),
        ("from_batch.mask_tiled", "LatentFromBatch", {"samples": "d_nm2"}, {}, {"batch_index": 2, "length": 1}),
        ("from_batch.mask1", "LatentFromBatch", {"samples": "a_nm1"}, {}, {"batch_index": 1, "length": 1}),
        ("add.same", "LatentAdd", {"samples1": "a", "samples2": "b"}, {}, {}),
        ("add.resized", "LatentAdd", {"samples1": "a_nm2_bi", "samples2": "c"}, {}, {}),
        ("add.batch_cut", "LatentAdd", {"samples1": "a", "samples2": "d"}, {}, {}),
        ("add.channels_broadcast", "LatentAdd", {"samples1": "a", "samples2": "c1"}, {}, {}),
        ("subtract.same", "LatentSubtract", {"samples1": "a", "samples2": "b"}, {}, {}),
        ("subtract.resized", "LatentSubtract", {"samples1": "big", "samples2": "d"}, {}, {}),
        ("subtract.channels", "LatentSubtract", {"samples1": "c1", "samples2": "a"}, {}, {}),
        ("multiply.plain", "LatentMultiply", {"samples": "a_nm2_bi"}, {}, {"multiplier": 1.37}),
        ("multiply.negative", "LatentMultiply", {"samples": "d"}, {}, {"multiplier": -2.5}),
    ]

    def latent_dict(name):
        spec = latents[name]
        d = {"samples": tensors[spec["samples"]].clone()}
        if "noise_mask" in spec:
            d["noise_mask"] = tensors[spec["noise_mask"]].clone()
        if "batch_index" in spec:
            d["batch_index"] = list(spec["batch_index"])
        return d

    case_list = []
    for name, node, lat, masks, lits in cases:
        cls, fn, _ = node_classes[node]
        kwargs = dict(lits)
        kwargs.update({k: latent_dict(v) for k, v in lat.items()})
        kwargs.update({k: tensors[v].clone() for k, v in masks.items()})
        entry = {"name": name, "node": node, "latents": lat, "masks": masks, "literals": lits}
        try:
            out = run_node(cls, fn, kwargs)
        except Exception as e:  # torch refuses these shapes: headroom must refuse them too
            entry["error"] = str(e)
            case_list.append(entry)
            continue
        tensors[f"out.{name}.samples"] = out["samples"]
        if "noise_mask" in out:
            tensors[f"out.{name}.noise_mask"] = out["noise_mask"]
        if "batch_index" in out:
            entry["batch_index"] = list(out["batch_index"])
        case_list.append(entry)

    display = dict(nodes.NODE_DISPLAY_NAME_MAPPINGS)
    display.update(getattr(nm, "NODE_DISPLAY_NAME_MAPPINGS", {}))
    info = {n: (v1_info(c, display) if kind == V1 else v3_info(c))
            for n, (c, _, kind) in node_classes.items()}
    meta = {"latents": json.dumps(latents), "cases": json.dumps(case_list),
            "object_info": json.dumps(info), "comfyui": "a125cd84b054a57729b5eecab930ca9408719832"}
    write_safetensors(out_path, tensors, meta)
    for c in case_list:
        print(c["name"], "ERROR " + c["error"] if "error" in c else
              list(tensors[f"out.{c['name']}.samples"].shape))


if __name__ == "__main__":
    main()
