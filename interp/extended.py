"""The reference value of an array of an extended dtype that converts to and from its
representation (``lax.convert_element_type`` binds ``to_edtype``/``from_edtype``):
``jax.experimental.primal_tangent_dtype`` dtypes and Pallas semaphores (their rules'
``allow_conversion``). PRNG keys have their own value type (:mod:`interp.keys`).

A value type, not a rule: it lives outside the rule modules like :class:`interp.keys.KeyArray`.
"""
from __future__ import annotations

import math

import numpy as np


class Represented:
    """An array of an extended dtype held as its representation ``data``: the array's own
    dimensions followed by ``rep_ndim`` dimensions of each element's representation."""
    __slots__ = ()
    data: np.ndarray
    rep_ndim: int

    @property
    def shape(self) -> tuple:
        return self.data.shape[:self.data.ndim - self.rep_ndim]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class ExtendedArray(Represented):
    """``data``: the representation, ``rep_dtype[*shape, *rep_shape]`` (JAX's
    ``core.physical_element_aval(dtype)`` gives rep_dtype and rep_shape); ``dtype``: the extended
    dtype. Rules that expect a NumPy array fail loudly on it (it has no NumPy value)."""
    __slots__ = ("dtype", "data", "rep_ndim")

    def __init__(self, dtype, data, rep_ndim: int):
        self.dtype = dtype
        self.data = data
        self.rep_ndim = rep_ndim

    def __array__(self, *args, **kwargs):
        raise TypeError(f"an array of the extended dtype {self.dtype} has no NumPy value; use "
                        f"its .data (the representation)")

    def __repr__(self):
        return f"ExtendedArray({self.dtype}{list(self.shape)}, data={self.data.tolist()})"
