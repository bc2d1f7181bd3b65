"""Per-thread scratch buffers for a rule's internal temporaries.

A large NumPy temporary is a fresh mmap that is page-faulted in and unmapped on every call (glibc
serves large blocks that way; on these VMs a fault costs ~1 us per 4 KiB page, which made a
float32 512^3 dot ~30% slower). A rule whose temporaries never leave it (the certified dot's
float64 copies, BLAS product and bracket) takes them from here instead: one buffer per named slot
and thread (``interp.schedule.context.scratch``), grown as needed, reused by the next call. Never for a value the rule returns or
stores. Temporaries above LIMIT bytes are allocated fresh (not kept alive)."""
from __future__ import annotations

import math

import numpy as np

from ..schedule import context

LIMIT = 16 << 20


def scratch(slot: str, shape, dtype) -> np.ndarray:
    """An uninitialised ``shape`` array of ``dtype`` that the caller fully writes before reading
    and drops before returning (the next use of ``slot`` on this thread overwrites it)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > LIMIT:
        return np.empty(shape, dtype)
    pool = context.scratch
    buf = pool.get(slot)
    if buf is None or buf.size < nbytes:
        buf = pool[slot] = np.empty(max(nbytes, 64), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)
