"""Mutable buffers behind ref-typed jaxpr values: ``jax.new_ref`` / ``run_state`` refs and Pallas
kernel refs share this class, so the state rules (get, swap, addupdate) serve both.

The state rules resolve JAX's indexers and ref transforms into a *normalized index*: a tuple with
one entry per dimension of ``array``, each an ``int`` (the dimension is dropped), a
``slice(start, stop, step)`` with explicit non-negative ints, or an integer ``np.ndarray``
(all array entries broadcast together, NumPy advanced-indexing style). All accesses go through
:meth:`Ref.read`, :meth:`Ref.write` and :meth:`Ref.accumulate`; subclasses (Pallas) add
uninitialized-read tracking, race detection and naming there.
"""
from __future__ import annotations

import numpy as np

from .errors import OutOfBoundsError


class Ref:
    __slots__ = ("array", "name", "check_bounds", "__weakref__")

    # Whether the state rules map a negative index i in [-size, 0) to size + i before the access,
    # as JAX's discharge of get/swap/addupdate does for jax.new_ref refs (lax.dynamic_slice and
    # jnp indexing normalise negative indices). A subclass whose target leaves negative indices
    # undefined (Pallas kernels) sets this False and they then fail the bounds check.
    wraps_negative_indices = True

    def __init__(self, array: np.ndarray, name: str = "ref", check_bounds: bool = True):
        self.array = array
        self.name = name
        self.check_bounds = check_bounds

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def describe(self) -> str:
        """How error messages name this buffer (Pallas adds kernel and grid point)."""
        return f"ref '{self.name}' {self.array.dtype}{list(self.array.shape)}"

    def check_index(self, index: tuple) -> None:
        """Raise OutOfBoundsError if any element of the normalized index lies outside the array."""
        if not self.check_bounds:
            return
        for dim, (ix, size) in enumerate(zip(index, self.array.shape)):
            if isinstance(ix, slice):
                start, stop, step = ix.start, ix.stop, ix.step or 1
                n = max(0, -(-(stop - start) // step))
                if n and (start < 0 or start + (n - 1) * step >= size):
                    raise self._outside(dim, f"[{start}:{stop}:{step}]", size)
            elif type(ix) is int:  # (the common scalar index, without NumPy's array reductions)
                if not 0 <= ix < size:
                    raise self._outside(dim, f"index {ix}", size)
            else:
                arr = np.asarray(ix)
                if arr.size and (arr.min() < 0 or arr.max() >= size):
                    bad = arr[(arr < 0) | (arr >= size)].ravel()[0]
                    raise self._outside(dim, f"index {int(bad)}", size)

    def _outside(self, dim: int, where: str, size: int) -> OutOfBoundsError:
        return OutOfBoundsError(f"{self.describe()}: dimension {dim} accessed at {where}, size "
                                f"{size} (ref_index/out-of-bounds)")

    def read(self, index: tuple) -> np.ndarray:
        self.check_index(index)
        return np.array(self.array[index], copy=True)

    def write(self, index: tuple, value) -> None:
        self.check_index(index)
        self.array[index] = value

    def swap(self, index: tuple, value) -> np.ndarray:
        """The old value of ``self[index]`` (a copy), then ``self[index] = value``."""
        old = self.read(index)
        self.write(index, value)
        return old

    def accumulate(self, index: tuple, value) -> None:
        """``ref[index] += value`` rounded to the ref's dtype (addupdate).

        With array indices every duplicate position receives every one of its updates (in
        row-major order of the index arrays, each addition rounded): ``np.add.at``, not
        ``a[i] = a[i] + v`` which would keep only the last duplicate."""
        self.check_index(index)
        if any(isinstance(ix, np.ndarray) for ix in index):
            np.add.at(self.array, index, value)
        else:
            self.array[index] = self.array[index] + value

    def __repr__(self):
        return f"Ref({self.describe()})"
