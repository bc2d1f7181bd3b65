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
