"""JAX ref indexers and view transforms, resolved into the Ref contract's normalized index.

Shared by the state rules (``interp/rules/state.py``: get/swap/addupdate) and the Pallas engine
(``interp/pallas``: block views, DMA operands), so the engine resolves a ref's transforms without
importing a rule family. The normalized index is one int, slice or integer array per dimension of
the ref's buffer (``interp/refs.py``). Semantics and sources: ``spec/state.py``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import jax
from jax._src.state import indexing as _indexing
from jax._src.state import types as _state_types

from . import dtypes as D
from .evaluator import Literal
from .refs import Ref

Slice = _indexing.Slice
NDIndexer = _indexing.NDIndexer
# Transforms that only re-type a ref (memory space) and leave its elements where they are.
_NEUTRAL = tuple(getattr(_state_types, n) for n in ("MemorySpaceCastTransform",)
                 if hasattr(_state_types, n))

# How a view transform moves elements: transform class name -> fn(positions, transform) giving the
# flat buffer position of every element of the transformed view, from those of its input view.
# Exact for any transform that only rearranges elements. Other families (Pallas GPU/TPU layout
# transforms) register theirs here.
POSITION_TRANSFORMS: dict = {
    "ReshapeTransform": lambda pos, t: pos.reshape(t.shape),
    "RefReshaper": lambda pos, t: pos.reshape(t.shape),
    "TransposeTransform": lambda pos, t: pos.transpose(t.permutation),
    "TransposeRef": lambda pos, t: pos.transpose(t.permutation),
    "RefTransposer": lambda pos, t: pos.transpose(t.permutation),
}
_BITCASTS = ("BitcastTransform", "RefBitcaster")


# --- index normalisation ------------------------------------------------------------------------

def _int(x) -> int:
    return int(np.asarray(x))


def _slice_index(start: int, n: int, stride, size: int, wrap: bool) -> slice:
    """Slice(start, n, stride) of a dimension of ``size`` as a normalized slice."""
    if stride < 1:
        raise NotImplementedError(f"ref slice with stride {stride}")
    if wrap and start < 0 and stride == 1 and start >= -size:
        start += size
    return slice(start, start + (n - 1) * stride + 1 if n else start, stride)


def _scalar_index(v: int, size: int, wrap: bool) -> int:
    return v + size if wrap and -size <= v < 0 else v


def normalize_indexer(indexer, shape, wrap: bool) -> tuple:
    """The Ref index contract for an NDIndexer applied to an array of ``shape``.

    Ints drop their dimension; Slice(start, size, stride) becomes slice(start, start+(size-1)*stride+1,
    stride); integer arrays (JAX has already broadcast them to one shape) index NumPy-style, which
    places the indexed dimensions as JAX's NDIndexer.get_indexer_shape does (in place when the
    array indexers are adjacent, in front otherwise). With ``wrap``, negative ints in [-size, 0)
    count from the end (JAX's discharge: dynamic_slice and jnp indexing normalise them).
    """
    out = []
    for ix, size in zip(indexer.indices, shape):
        if isinstance(ix, Slice):
            out.append(_slice_index(_int(ix.start), _int(ix.size), ix.stride, size, wrap))
        else:
            if isinstance(ix, Ref):  # an indexer held in a ref (Pallas): read it whole
                ix = ix.read(_whole(ix.shape))
            a = np.asarray(ix)
            if not D.is_int(a.dtype):
                raise TypeError(f"ref index of dtype {a.dtype}")
            if a.ndim == 0:
                out.append(_scalar_index(int(a), size, wrap))
            else:
                a = a.astype(np.int64)
                if wrap:
                    a = np.where((a < 0) & (a >= -size), a + size, a)
                out.append(a)
    return tuple(out)


class _Leaf:
    """Stands for flat index leaf ``pos`` while a transform tree is unflattened at plan time."""
    __slots__ = ("pos",)

    def __init__(self, pos):
        self.pos = pos


def compile_indexer(tree, leaf_atoms) -> "Callable | None":
    """``fn(flat_idx, shape, wrap)`` giving exactly ``_resolve``'s index, built once per equation,
    for the common transform chain: one NDIndexer of slices and scalar integer indices.

    ``leaf_atoms`` are the equation's index operands (jaxpr atoms). Unflattening JAX's transform
    pytree builds NDIndexer/Slice dataclasses on every access, which costs more than the access
    itself for small blocks; here the tree is unflattened once, with placeholders, and each
    dimension becomes a read of its leaf (or a constant for literals and static slice bounds),
    normalised by the same ``_slice_index`` / ``_scalar_index`` as ``normalize_indexer``.
    Anything else (array indexers, view transforms, indexers held in refs) returns None: the
    equation keeps the generic path.
    """
    if tree is None:
        return None
    try:
        transforms = jax.tree_util.tree_unflatten(tree, [_Leaf(i) for i in range(tree.num_leaves)])
    except Exception:  # a transform whose unflatten inspects its leaves: keep the generic path
        return None
    transforms = [t for t in transforms if t is not None and not isinstance(t, _NEUTRAL)]
    if not transforms:
        return _static(lambda flat, shape, wrap: _whole(shape))
    if len(transforms) != 1 or type(transforms[0]) is not NDIndexer:
        return None

    def operand(x):
        """A function of the flat leaves giving the int ``x`` stands for, or None."""
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            v = int(x)
            return lambda flat: v
        if not isinstance(x, _Leaf):
            return None
        atom = leaf_atoms[x.pos]
        aval = getattr(atom, "aval", None)
        if (type(aval).__name__ != "ShapedArray" or aval.shape != ()
                or not D.is_int(np.dtype(aval.dtype))):
            return None
        if isinstance(atom, Literal):
            v = int(np.asarray(atom.val))
            return lambda flat: v
        p = x.pos
        dynamic.append(p)
        return lambda flat: int(flat[p])

    dynamic = []
    dims = []
    for ix in transforms[0].indices:
        if isinstance(ix, Slice):
            start, size = operand(ix.start), operand(ix.size)
            if start is None or size is None or not isinstance(ix.stride, int):
                return None
            dims.append((start, size, ix.stride))
        else:
            v = operand(ix)
            if v is None:
                return None
            dims.append((v, None, None))
    dims = tuple(dims)

    def index(flat, shape, wrap) -> tuple:
        return tuple(_scalar_index(v(flat), n, wrap) if size is None else
                     _slice_index(v(flat), size(flat), stride, n, wrap)
                     for (v, size, stride), n in zip(dims, shape))
    if not dynamic:
        return _static(index)
    # The same leaf values give the same tuple object (as a static index does): building the
    # tuple costs about what the lookup does, and refs that remember the indices they checked
    # by identity (Pallas kernel refs) then check each distinct index once.
    cache = {}

    def dynamic_index(flat, shape, wrap) -> tuple:
        key = (tuple([int(flat[p]) for p in dynamic]), shape, wrap)
        out = cache.get(key)
        if out is None:
            out = index(flat, shape, wrap)
            if len(cache) >= MAX_INDICES:
                cache.clear()
            cache[key] = out
        return out
    return dynamic_index


MAX_INDICES = 1 << 12   # distinct dynamic indices remembered per equation


def _static(index):
    """A static index (x_ref[...], o_ref[0, :, 8:16]) normalised once per (shape, wrap)."""
    cache = {}

    def static_index(flat, shape, wrap) -> tuple:
        key = (shape, wrap)
        out = cache.get(key)
        if out is None:
            out = cache[key] = index(flat, shape, wrap)
        return out
    return static_index


def _whole(shape) -> tuple:
    return tuple(slice(0, n, 1) for n in shape)


def _resolve(eqn, ref: Ref, flat_idx, tree):
    """(normalized index into ref.array, dtype the view is read as)."""
    transforms = list(jax.tree_util.tree_unflatten(tree, flat_idx)) if tree is not None else []
    transforms = [t for t in transforms if t is not None and not isinstance(t, _NEUTRAL)]
    wrap = ref.wraps_negative_indices
    if not transforms:
        return _whole(ref.shape), ref.dtype
    if len(transforms) == 1 and isinstance(transforms[0], NDIndexer):
        return normalize_indexer(transforms[0], ref.shape, wrap), ref.dtype
    key = _chain_key(ref, transforms)
    hit = _CHAINS.get(key) if key is not None else None
    if hit is not None:
        return hit
    out = _resolve_chain(eqn, ref, transforms, wrap)
    if key is not None:
        if len(_CHAINS) >= MAX_INDICES:
            _CHAINS.clear()
        for positions in out[0]:   # shared by every later access: read-only (checked once)
            if type(positions) is np.ndarray:
                positions.flags.writeable = False
        _CHAINS[key] = out
    return out


# Resolved chains of views (Mosaic GPU's tiled SMEM: every access goes through unswizzle, untile
# and an indexer) by the buffer's geometry and the transforms' values: the positions depend on
# nothing else.
_CHAINS: dict = {}


def _chain_key(ref, transforms) -> "tuple | None":
    parts = []
    for t in transforms:
        if isinstance(t, NDIndexer):
            dims = []
            for ix in t.indices:
                if isinstance(ix, Slice):
                    if not isinstance(ix.stride, int):
                        return None
                    dims.append((_int(ix.start), _int(ix.size), ix.stride))
                elif isinstance(ix, (int, np.integer)) or (
                        isinstance(ix, np.ndarray) and ix.ndim == 0):
                    dims.append(_int(ix))
                else:
                    return None
            parts.append(tuple(dims))
        else:
            try:
                hash(t)
            except TypeError:
                return None
            parts.append(t)
    return (ref.shape, ref.array.size, ref.dtype, ref.wraps_negative_indices, ref.check_bounds,
            tuple(parts))


def _resolve_chain(eqn, ref, transforms, wrap):
    # A chain of views: follow the flat position of every element of the view through the
    # transforms (exact for indexing, reshape and transpose), then index the buffer with the
    # unravelled positions.
    pos = np.arange(ref.array.size, dtype=np.int64).reshape(ref.shape)
    dtype = ref.dtype
    for t in transforms:
        if isinstance(t, NDIndexer):
            index = normalize_indexer(t, pos.shape, wrap)
            Ref(pos, ref.describe(), ref.check_bounds).check_index(index)
            pos = pos[index]
        elif type(t).__name__ in POSITION_TRANSFORMS:
            pos = POSITION_TRANSFORMS[type(t).__name__](pos, t)
        elif type(t).__name__ in _BITCASTS:
            if np.dtype(t.dtype).itemsize != np.dtype(dtype).itemsize:
                raise eqn.unsupported(f"ref_index/bitcast-width: ref bitcast {dtype} -> "
                                      f"{np.dtype(t.dtype)} changes the element width")
            dtype = np.dtype(t.dtype)
        else:
            raise eqn.unsupported(f"ref_index/bitcast-width: ref transform {type(t).__name__}")
    return np.unravel_index(pos, ref.shape), dtype
