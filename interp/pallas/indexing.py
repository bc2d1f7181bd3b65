"""Resolving a ref and its transforms (``x_ref.at[...]``, reshapes, bitcasts) into the shared
Ref contract's normalized index. The normalisation itself is shared with the state family
(``interp/ref_indexing.py``); this is the one call point Pallas rules use."""
from __future__ import annotations

import jax
import numpy as np

from .. import ref_indexing


def split_transformed(x):
    """(ref, transforms) of a ref or a ``TransformedRef`` (what DMA operands unflatten to)."""
    if hasattr(x, "transforms") and hasattr(x, "ref"):
        return x.ref, tuple(x.transforms)
    return x, ()


def resolve(eqn, ref, transforms):
    """(ref, normalized index, dtype the elements are viewed as) of ``ref`` under ``transforms``."""
    transforms = tuple(transforms or ())
    if len(transforms) == 1 and isinstance(transforms[0], ref_indexing.NDIndexer):
        # The common case (x_ref.at[...] / pl.ds): the state family's normaliser directly,
        # without flattening the indexer to re-build it.
        return ref, ref_indexing.normalize_indexer(transforms[0], ref.shape,
                                                   ref.wraps_negative_indices), ref.dtype
    flat, tree = jax.tree_util.tree_flatten(transforms)
    index, dtype = ref_indexing._resolve(eqn, ref, flat, tree)
    return ref, index, np.dtype(dtype)


def resolve_transformed(eqn, x):
    ref, transforms = split_transformed(x)
    return resolve(eqn, ref, transforms)


class FlatTransforms:
    """A ref's transforms as a primitive's operands carry them: a treedef and its leaves (the
    dynamic indices). Kernels resolve the same few views at every step: :func:`cached_view` finds
    them by the leaves' values without rebuilding and re-flattening the transform objects."""
    __slots__ = ("treedef", "leaves", "_key")

    def __init__(self, treedef, leaves):
        self.treedef = treedef
        self.leaves = leaves
        self._key = False

    def unflatten(self):
        return self.treedef.unflatten(self.leaves)

    def key(self):
        """(treedef, leaf values with their types), or None where a leaf is not a scalar."""
        if self._key is False:
            parts = []
            for leaf in self.leaves:
                kind = type(leaf)
                if kind is int or kind in _INTEGER_SCALARS:   # the type names the dtype
                    parts.append((kind, int(leaf)))
                elif kind is np.ndarray and leaf.ndim == 0 and leaf.dtype.kind in "iub":
                    parts.append((leaf.dtype.str, leaf.item()))
                else:
                    self._key = None
                    return None
            self._key = (self.treedef, tuple(parts))
        return self._key


# NumPy's integer and bool scalar types (a leaf of one of these is a scalar of its dtype).
_INTEGER_SCALARS = frozenset(np.dtype(code).type for code in np.typecodes["AllInteger"] + "?")


# Resolved views by (transforms' key, the buffer's geometry): the normalized index depends on
# nothing else (interp/ref_indexing.py resolves chains of views from the same data). The index
# object is handed out again, so the bounds checks and race footprints keyed by its identity
# (KernelRef.check_index, warpgroups' masks) are computed once per view.
_VIEWS: dict = {}
MAX_VIEWS = 4096


def _geometry(ref):
    array = ref.array
    return (array.shape, array.size, array.dtype, ref.wraps_negative_indices, ref.check_bounds)


def cached_view(ref, transforms: FlatTransforms):
    """The normalized index of ``ref`` under ``transforms`` resolved before, or None."""
    key = transforms.key()
    if key is None or not hasattr(ref, "array") or hasattr(ref, "transforms"):
        return None
    return _VIEWS.get((key, _geometry(ref)))


def remember_view(ref, transforms: FlatTransforms, index) -> None:
    key = transforms.key()
    if key is None or not hasattr(ref, "array") or hasattr(ref, "transforms"):
        return
    if type(index) is not tuple:
        return
    for ix in index:   # shared by every later access: no one may write into it
        if type(ix) is np.ndarray:
            ix.flags.writeable = False
        elif type(ix) not in (int, slice):
            return
    if len(_VIEWS) >= MAX_VIEWS:
        _VIEWS.clear()
    _VIEWS[(key, _geometry(ref))] = index
