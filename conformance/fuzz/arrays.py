"""Arrays on disk: ``.npz`` files that keep every dtype (bfloat16, float8, int4...: NumPy would
store ml_dtypes arrays as opaque bytes), stored as their bits with the dtype's name."""
from __future__ import annotations

import json

import numpy as np

from interp import dtypes as D

from .ops import numpy_dtype


def save(path: str, arrays) -> None:
    arrays = [np.asarray(a) for a in arrays]
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]
    bits = {f"a{i}": np.ascontiguousarray(a).reshape(-1).view(D.storage_uint(a.dtype)) for i, a in enumerate(arrays)}
    np.savez(path, meta=np.array(json.dumps(meta)), **bits)


def load(path: str) -> list[np.ndarray]:
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        return [data[f"a{i}"].view(numpy_dtype(m["dtype"])).reshape(m["shape"]) for i, m in enumerate(meta)]
