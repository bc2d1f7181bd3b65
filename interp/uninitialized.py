"""What never-written memory holds (``Options.uninitialized``): one convention for the whole
reference — Pallas buffers, ``lax.empty``, refs created without a value.

"nan" (default) fills it with :func:`poison_value`; "zero" with zeros (what XLA:CPU's lowering
of ``lax.empty`` gives); "raise" raises :class:`UninitializedReadError` at the first read of
never-written data, wherever reads are tracked: Pallas kernel refs, refs created without a value
(``empty_ref``: :class:`TrackedRef`), and ``lax.empty`` results (a written-mask carried through
data-moving primitives: interp/rules/lax_structure.py).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import UninitializedReadError
from .refs import Ref


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


class TrackedRef(Ref):
    """A ref created without a value under ``uninitialized="raise"``: it remembers which elements
    were written, and a read (get, swap, addupdate, freeze) touching an element never written
    raises :class:`UninitializedReadError`. Unwritten elements hold the poison value, so what
    never reaches a read is the same memory as under "nan"."""

    __slots__ = ("written",)

    def __init__(self, shape, dtype, name: str = "ref", check_bounds: bool = True):
        super().__init__(np.full(shape, poison_value(dtype), dtype), name, check_bounds)
        self.written = np.zeros(shape, bool)

    def _check_written(self, index: tuple) -> None:
        done = self.written[index]
        if not np.all(done):
            where = np.argwhere(~np.asarray(done))[0] if np.ndim(done) else ()
            raise UninitializedReadError(
                f"{self.describe()}: read of an element never written (index {tuple(int(i) for i in where)} "
                f"of the accessed region, {int(np.size(done) - np.count_nonzero(done))} such elements); "
                "uninitialized='raise' (empty_ref/c1)")

    def read(self, index: tuple) -> np.ndarray:
        self.check_index(index)
        self._check_written(index)
        return super().read(index)

    def write(self, index: tuple, value) -> None:
        super().write(index, value)
        self.written[index] = True

    def swap(self, index: tuple, value) -> np.ndarray:
        # `ref[i] = v` is a swap whose old value is unused (the jaxpr still binds it to a Var): a
        # swap is not a checked read of never-written memory; its old value there is the poison.
        old = Ref.read(self, index)
        self.write(index, value)
        return old

    def accumulate(self, index: tuple, value) -> None:
        self.check_index(index)
        self._check_written(index)      # += reads the old value
        super().accumulate(index, value)
