"""The reference value of a typed PRNG key array (:class:`KeyArray`).

A value type shared by the PRNG rules (``interp/rules/random.py``), the evaluator's extended-value
conversion and the Pallas engine (typed key operands of a ``pallas_call``); it lives outside the
rule modules so the engine can hold keys without importing a rule family.
"""
from __future__ import annotations

import jax
import numpy as np
from jax._src.random import prng as jax_prng

from .extended import Represented

U32 = np.uint32


class KeyArray(Represented):
    """The reference value of a typed PRNG key array: ``impl`` (a JAX ``PRNGImpl``) and
    ``data``, ``uint32[*shape, *impl.key_shape]``. ``dtype`` is JAX's key dtype."""
    __slots__ = ("impl", "data")

    def __init__(self, impl, data):
        data = np.asarray(data)
        if data.dtype != U32 or data.shape[data.ndim - len(impl.key_shape):] != tuple(impl.key_shape):
            raise TypeError(f"key data for {impl.name} must be uint32[..., "
                            f"{', '.join(map(str, impl.key_shape))}], got {data.dtype}{list(data.shape)}")
        self.impl = impl
        self.data = data

    @property
    def dtype(self):
        return jax_prng.KeyTy(self.impl)

    @property
    def rep_ndim(self) -> int:
        return len(self.impl.key_shape)

    def to_jax(self):
        """The same keys as a JAX key array."""
        return jax.random.wrap_key_data(self.data, impl=self.impl.name)

    def __array__(self, *args, **kwargs):
        raise TypeError("a key array has no NumPy value; use its .data (the key data)")

    # Generic rules (control flow) move opaque values with indexing and a few NumPy functions:
    # these act on the leading (key array) dimensions of the data, like JAX's KeyTyRules.
    def _check_index(self, idx):
        parts = idx if isinstance(idx, tuple) else (idx,)
        if any(p is Ellipsis or p is None for p in parts):
            raise TypeError("key arrays take only basic/advanced indices of their key dimensions")
        return idx

    def __getitem__(self, idx):
        return KeyArray(self.impl, self.data[self._check_index(idx)])

    def __setitem__(self, idx, value):
        self.data[self._check_index(idx)] = as_key(value).data

    def __len__(self):
        return self.shape[0]

    def __array_function__(self, func, types, args, kwargs):
        handler = _ARRAY_FUNCTIONS.get(func)
        return NotImplemented if handler is None else handler(*args, **kwargs)

    def __repr__(self):
        return f"KeyArray({self.dtype.name}{list(self.shape)}, data={self.data.tolist()})"


def _logical_axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _np_where(cond, x, y):
    x, y = as_key(x), as_key(y)
    cond = np.asarray(cond)
    return KeyArray(x.impl, np.where(cond.reshape(cond.shape + (1,) * len(x.impl.key_shape)),
                                     x.data, y.data))


def _np_stack(arrays, axis=0):
    arrays = [as_key(a) for a in arrays]
    axis = _logical_axis(axis, arrays[0].ndim + 1)
    return KeyArray(arrays[0].impl, np.stack([a.data for a in arrays], axis=axis))


def _np_concatenate(arrays, axis=0):
    arrays = [as_key(a) for a in arrays]
    axis = _logical_axis(axis, arrays[0].ndim)
    return KeyArray(arrays[0].impl, np.concatenate([a.data for a in arrays], axis=axis))


_ARRAY_FUNCTIONS = {
    np.where: _np_where,
    np.stack: _np_stack,
    np.concatenate: _np_concatenate,
    np.copy: lambda a, *args, **kw: KeyArray(as_key(a).impl, as_key(a).data.copy()),
    np.shape: lambda a: as_key(a).shape,
    np.ndim: lambda a: as_key(a).ndim,
}


def as_key(x) -> KeyArray:
    """A key operand as a :class:`KeyArray` (literals and constants arrive as JAX key arrays)."""
    if isinstance(x, KeyArray):
        return x
    if isinstance(x, jax_prng.PRNGKeyArray):
        return KeyArray(x._impl, np.asarray(jax.random.key_data(x)))
    raise TypeError(f"expected a PRNG key array, got {type(x).__name__}")
