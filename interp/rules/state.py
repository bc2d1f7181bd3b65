"""Rules: state (mutable refs): new_ref/empty_ref/freeze, get/swap/addupdate, run_state...

A ref-typed jaxpr value is an :class:`interp.refs.Ref`. get/swap/addupdate receive the ref, the
value and the flat leaves of their transform pytree (``tree``): an NDIndexer (ints, Slices with
strides, integer arrays), possibly after or before reshape/transpose/bitcast transforms. These
are resolved here into the Ref's normalized index (one int/slice/int-array per dimension of the
ref's buffer), so every access goes through ``Ref.read``/``write``/``accumulate``.
Semantics and sources: ``spec/state.py``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import jax
from jax._src.state import indexing as _indexing
from jax._src.state import types as _state_types

from .. import dtypes as D
from ..evaluator import Literal
from ..refs import Ref
from ..registry import register
from ..uninitialized import TrackedRef, fill_uninitialized

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
                raise eqn.unsupported(f"ref bitcast {dtype} -> {np.dtype(t.dtype)} changes the "
                                      "element width")
            dtype = np.dtype(t.dtype)
        else:
            raise eqn.unsupported(f"ref transform {type(t).__name__}")
    return np.unravel_index(pos, ref.shape), dtype


def _as_view(x, dtype):
    x = np.asarray(x)
    return x if x.dtype == dtype else x.view(dtype)


def _check_ref(eqn, ref):
    if not isinstance(ref, Ref):
        raise eqn.unsupported(f"expected a ref, got {type(ref).__name__}")


# --- access -------------------------------------------------------------------------------------

# Each access is a small function of (ref, normalized index, dtype the view is read as); the
# registered rule resolves the transform pytree per call, and its ``prepare`` (run once per
# equation by the plan) swaps in ``compile_indexer``'s precompiled index where it applies.

def _get(eqn, ref, index, dtype):
    return _as_view(ref.read(index), dtype)


def _swap(eqn, ref, index, dtype, val):
    return _as_view(ref.swap(index, _as_view(val, ref.dtype)), dtype)


def _addupdate(eqn, ref, index, dtype, val):
    if dtype != ref.dtype:  # JAX: "addupdate (+=) is not supported on bitcast views"
        raise eqn.unsupported("addupdate through a bitcast view")
    ref.accumulate(index, np.asarray(val))
    return []


def _access_rule(name, access, n_values):
    """Register the rule of an access primitive whose operands are (ref, ``n_values`` values,
    *flat index leaves), with its per-equation ``prepare``."""
    def rule(eqn, ref, *args, tree=None):
        _check_ref(eqn, ref)
        index, dtype = _resolve(eqn, ref, args[n_values:], tree)
        return access(eqn, ref, index, dtype, *args[:n_values])

    def prepare(ctx):
        index = compile_indexer(ctx.params.get("tree"), ctx.eqn.invars[1 + n_values:])
        if index is None:
            return rule

        def compiled(eqn, ref, *args, tree=None):
            if not isinstance(ref, Ref):
                _check_ref(eqn, ref)   # (raises)
            i = index(args[n_values:], ref.shape, ref.wraps_negative_indices)
            return access(eqn, ref, i, ref.dtype, *args[:n_values])
        return compiled

    rule.__name__ = name
    rule.prepare = prepare
    return register(name)(rule)


get = _access_rule("get", _get, 0)
swap = _access_rule("swap", _swap, 1)
addupdate = _access_rule("addupdate", _addupdate, 1)


# --- creation and end of life -------------------------------------------------------------------

def _new_ref(eqn, array):
    return Ref(array, name=f"{eqn.name}@{id(eqn):x}", check_bounds=eqn.options.check_bounds)


@register("new_ref", "mutable_array")
def new_ref(eqn, init, **params):
    # The ref owns a copy: later writes never alias the initial value. memory_space/kind/pin do
    # not change values.
    dtype = eqn.out_aval.inner_aval.dtype if hasattr(eqn.out_aval, "inner_aval") else init.dtype
    return _new_ref(eqn, np.array(init, dtype=dtype, copy=True))


def uninitialized_fill(eqn, shape, dtype) -> np.ndarray:
    """Fresh memory under options.uninitialized (interp/uninitialized.py); 'raise' needs read
    tracking the plain Ref does not have."""
    if eqn.options.uninitialized == "raise":
        raise eqn.unsupported("uninitialized='raise' for refs created without a value")
    return fill_uninitialized(shape, dtype, eqn.options.uninitialized)


@register("empty_ref")
def empty_ref(eqn, *, ty, **params):
    if eqn.options.uninitialized == "raise":
        # Reads of elements never written raise (interp/uninitialized.py TrackedRef).
        return TrackedRef(ty.shape, ty.dtype, name=f"{eqn.name}@{id(eqn):x}",
                          check_bounds=eqn.options.check_bounds)
    return _new_ref(eqn, uninitialized_fill(eqn, ty.shape, ty.dtype))


@register("freeze")
def freeze(eqn, ref):
    _check_ref(eqn, ref)
    return ref.read(_whole(ref.shape))   # a read of every element


@register("free_ref")
def free_ref(eqn, ref):
    return []


@register("run_state")
def run_state(eqn, *args, jaxpr, which_linear=None, is_initialized=None):
    # Discharged semantics (jax/_src/state/discharge.py _run_state_impl): the body runs on fresh
    # refs holding the inputs (uninitialized ones as JAX's default initialization) and the
    # results are the refs' final values.
    plan, consts = eqn.closed_plan(jaxpr)
    invars = plan.jaxpr.invars
    if is_initialized is None:
        is_initialized = (True,) * len(invars)
    it = iter(args)
    refs = []
    for init, var in zip(is_initialized, invars):
        aval = getattr(var.aval, "inner_aval", var.aval)
        if init:
            refs.append(_new_ref(eqn, np.array(next(it), dtype=aval.dtype, copy=True)))
        else:
            refs.append(_new_ref(eqn, uninitialized_fill(eqn, aval.shape, aval.dtype)))
    plan.run(consts, refs)
    return [np.array(r.array, copy=True) for r in refs]


# --- value-level helpers ------------------------------------------------------------------------

@register("broadcast_to")
def broadcast_to(eqn, a, *, shape):
    return np.array(np.broadcast_to(a, shape), copy=True)


@register("pin", "unpin", "accum_grad_in_ref")
def pin(eqn, x, **params):
    return x  # placement only


@register("with_memory_space_constraint")
def with_memory_space_constraint(eqn, x, **params):
    return x
