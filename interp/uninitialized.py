"""What never-written memory holds (``Options.uninitialized``): one convention for the whole
reference — Pallas buffers, ``lax.empty``, refs created without a value.

"nan" (default) fills it with :func:`poison_value`; "zero" with zeros (what XLA:CPU's lowering
of ``lax.empty`` gives); "raise" is implemented where reads are tracked (Pallas kernel refs).
"""
from __future__ import annotations

import numpy as np

from . import dtypes


def poison_value(dtype):
    """floats and complex: NaN (quiet, positive); signed ints: the minimum (as JAX's interpret
    mode); unsigned ints: the maximum (all ones: 0 would look like valid data); bool: True (JAX's
    interpret mode uses False, which is indistinguishable from a real False)."""
    dtype = np.dtype(dtype)
    if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
        return np.array(np.nan).astype(dtype)[()]
    if dtypes.is_signed(dtype):
        return dtype.type(dtypes.iinfo(dtype).min)
    if dtypes.is_unsigned(dtype):
        return dtype.type(dtypes.iinfo(dtype).max)
    if dtypes.is_bool(dtype):
        return np.True_
    raise NotImplementedError(f"no poison value for dtype {dtype}")


def fill_uninitialized(shape, dtype, mode: str) -> np.ndarray:
    """A fresh buffer of never-written memory under ``mode`` ("nan", "zero" or "raise")."""
    if mode == "zero":
        return np.zeros(shape, dtype)
    return np.full(shape, poison_value(dtype), dtype)
