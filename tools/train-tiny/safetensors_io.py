"""safetensors read/write without the safetensors package: an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
tensors' bytes back to back."""
import json
import struct

import numpy as np
import torch

_DTYPES = {torch.float16: "F16", torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}
_NUMPY = {"F16": np.float16, "F32": np.float32, "I64": np.int64}


def write(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read(path):
    """(tensors as float32 / int64 torch tensors, metadata)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=_NUMPY[e["dtype"]]).reshape(e["shape"])
        t = torch.from_numpy(arr.copy())
        out[name] = t.float() if t.is_floating_point() else t
    return out, meta
