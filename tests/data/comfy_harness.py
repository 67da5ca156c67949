# Running ComfyUI's own code on the CPU for the golden generators (import_comfy for
# flux/e2e/make_flux_e2e_golden.py and fp8/e2e/make_fp8_e2e_golden.py; stub_packages, einops_shim
# and safetensors_write for the older generators of lora/, t5/ and flux/ too): stubs for the
# packages ComfyUI imports and these runs never call, shims for what an old torch lacks, and the
# few lines that read and write safetensors and PNGs without those packages.
import importlib.abc
import importlib.machinery
import importlib.util
import json
import struct
import sys
import types
import zlib

import numpy as np
import torch

STUB_WHEN_MISSING = {"safetensors", "transformers", "tokenizers", "sentencepiece", "torchsde",
                     "tqdm", "av", "torchvision", "torchaudio", "spandrel", "kornia", "psutil",
                     "PIL", "scipy", "trampoline", "comfy_aimdo", "aiohttp", "einops"}


# ---------------------------------------------------------------- shims for an old or bare python

class _Anything:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, n):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = roots
        self.used = set()  # the stubbed packages something imported

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        self.used.add(spec.name.split(".")[0])
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, m):
        pass


def stub_packages(roots):
    """From now on every module under a top-level name in roots imports as an empty stub (one
    that is never called: calling it does nothing). Returns the finder: its .roots is roots itself
    (a caller may add names later), its .used the stubbed names something imported."""
    finder = _StubFinder(roots)
    sys.meta_path.insert(0, finder)
    return finder


def einops_shim():
    """The four einops patterns comfy/ldm/flux uses, written out (only when einops is absent)."""
    def rearrange(t, pattern, **s):
        if pattern == "b n d (i j) -> b n d i j":
            return t.reshape(*t.shape[:-1], s["i"], s["j"])
        if pattern == "b c (h ph) (w pw) -> b (h w) (c ph pw)":
            b, c, H, W = t.shape
            ph, pw = s["ph"], s["pw"]
            t = t.reshape(b, c, H // ph, ph, W // pw, pw).permute(0, 2, 4, 1, 3, 5)
            return t.reshape(b, (H // ph) * (W // pw), c * ph * pw)
        if pattern == "b (h w) (c ph pw) -> b c (h ph) (w pw)":
            b, n, d = t.shape
            h, w, ph, pw = s["h"], s["w"], s["ph"], s["pw"]
            c = d // (ph * pw)
            t = t.reshape(b, h, w, c, ph, pw).permute(0, 3, 1, 4, 2, 5)
            return t.reshape(b, c, h * ph, w * pw)
        raise NotImplementedError("einops shim: " + pattern)

    def repeat(t, pattern, **s):
        if pattern == "h w c -> b (h w) c":
            h, w, c = t.shape
            return t.reshape(1, h * w, c).expand(s["b"], h * w, c)
        raise NotImplementedError("einops shim: " + pattern)

    m = _StubModule("einops")  # other attributes (einops.layers, ...): stubs, never called
    m.rearrange, m.repeat = rearrange, repeat
    m.__path__ = []
    sys.modules["einops"] = m
    for sub in ("einops.layers", "einops.layers.torch"):
        sys.modules[sub] = _StubModule(sub)
        sys.modules[sub].__path__ = []


def _tqdm_shim():
    """The samplers loop over tqdm.auto.trange(n, disable=...): a plain range (tqdm absent)."""
    for name in ("tqdm", "tqdm.auto"):
        m = _StubModule(name)
        m.__path__ = []
        m.trange = lambda n, *a, **k: range(n)
        m.tqdm = lambda it=None, *a, **k: it
        sys.modules[name] = m


def _sdpa_shim():
    """torch < 2 has no scaled_dot_product_attention: the same math, softmax(q k^T/sqrt(d)+m) v."""
    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
        return torch.softmax(s, dim=-1) @ v
    torch.nn.functional.scaled_dot_product_attention = sdpa


def import_comfy(comfy_dir):
    """Returns a function that names what was shimmed or stubbed (for the golden's metadata)."""
    missing = {r for r in STUB_WHEN_MISSING if importlib.util.find_spec(r) is None}
    shimmed = []
    if "einops" in missing:
        einops_shim()
        shimmed.append("einops (shim)")
        missing.discard("einops")
    if "tqdm" in missing:
        _tqdm_shim()
        shimmed.append("tqdm (shim)")
        missing.discard("tqdm")
    finder = stub_packages(missing)
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        _sdpa_shim()
        shimmed.append("F.scaled_dot_product_attention (shim)")
    sys.path.insert(0, comfy_dir)
    import comfy.options
    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]  # ComfyUI's own switch: every model on the CPU, float32
    import comfy.model_management  # noqa: F401
    return lambda: ",".join(shimmed + sorted(u + " (stub)" for u in finder.used)) or "none"


# ---------------------------------------------------------------- runs

def sample_recording_steps(model, noise, steps, cfg, sampler_name, scheduler, positive, negative,
                           latent_image, seed):
    """comfy.sample.sample as KSampler (nodes.common_ksampler) calls it, denoise 1 and no progress
    bar, with a callback recording every step: returns the samples, the x each step started from
    and the model's x0 of each step (both stacked, [steps, ...])."""
    import comfy.sample
    xs, x0s = [], []

    def callback(step, x0, x, total):
        xs.append(x.clone())
        x0s.append(x0.clone())
    samples = comfy.sample.sample(model, noise, steps, cfg, sampler_name, scheduler, positive,
                                  negative, latent_image, denoise=1.0, callback=callback,
                                  disable_pbar=True, seed=seed)
    return samples, torch.stack(xs), torch.stack(x0s)


# ---------------------------------------------------------------- files

DT = {"F16": np.float16, "F32": np.float32, "I64": np.int64, "U8": np.uint8}
NP_TO_DT = {np.dtype(v): k for k, v in DT.items()}


def safetensors_write(path, entries, metadata=None):
    """Writes (name, dtype name, shape, data bytes) entries in the order given, after a
    "__metadata__" entry unless metadata is None: the header's length as 8 little-endian bytes,
    the JSON header padded with spaces to a multiple of 8 bytes, then the data. The safetensors
    writers of the generators here end in it: their files differ only in what they pass."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def save_safetensors(path, tensors, metadata):
    def entries():
        for name in sorted(tensors):
            a = np.ascontiguousarray(tensors[name])
            yield name, NP_TO_DT[a.dtype], a.shape, a.astype(a.dtype.newbyteorder("<")).tobytes()
    safetensors_write(path, entries(), metadata)


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        a = np.frombuffer(data[8 + n + s:8 + n + t], dtype=DT[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def save_png(path, rgb):
    """8-bit RGB, no metadata (SaveImage also writes the prompt as text chunks; pixels only here)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)
