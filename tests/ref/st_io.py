"""st_io.py - safetensors files from Python for the reference checks
(check_torchvision.py, check_train_torch.py): numpy only, no safetensors
package (Debian 12 has none)."""
import json
import struct

import numpy as np


def save_safetensors(path, sd):
    """A state_dict (name -> torch tensor) as safetensors: header JSON,
    then raw little-endian."""
    hdr, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for k, t in sd.items():
        a = t.detach().cpu().contiguous().numpy()
        dt = {np.float32: "F32", np.int64: "I64"}[a.dtype.type]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape),
                  "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_safetensors(path):
    """name -> numpy array (F32 or I64) of a safetensors file."""
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    hdr = json.loads(b[8:8 + n])
    data = b[8 + n:]
    dts = {"F32": "<f4", "I64": "<i8"}
    sd = {}
    for k, e in hdr.items():
        if k == "__metadata__":
            continue
        s, t = e["data_offsets"]
        a = np.frombuffer(data[s:t], dtype=dts[e["dtype"]])
        sd[k] = a.reshape(e["shape"]).copy()
    return sd
