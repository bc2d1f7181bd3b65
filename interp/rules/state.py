"""Rules: state (mutable refs): new_ref/empty_ref/freeze, get/swap/addupdate, run_state...

A ref-typed jaxpr value is an :class:`interp.refs.Ref`. get/swap/addupdate receive the ref, the
value and the flat leaves of their transform pytree (``tree``): an NDIndexer (ints, Slices with
strides, integer arrays), possibly after or before reshape/transpose/bitcast transforms. These
are resolved here into the Ref's normalized index (one int/slice/int-array per dimension of the
ref's buffer), so every access goes through ``Ref.read``/``write``/``accumulate``.
Semantics and sources: ``spec/state.py``.
"""
from __future__ import annotations

import numpy as np
import jax
from jax._src.state import indexing as _indexing
from jax._src.state import types as _state_types

from .. import dtypes as D
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
            start, n, stride = _int(ix.start), _int(ix.size), ix.stride
            if stride < 1:
                raise NotImplementedError(f"ref slice with stride {stride}")
            if wrap and start < 0 and stride == 1 and start >= -size:
                start += size
            out.append(slice(start, start + (n - 1) * stride + 1 if n else start, stride))
        else:
            if isinstance(ix, Ref):  # an indexer held in a ref (Pallas): read it whole
                ix = ix.read(tuple(slice(0, n, 1) for n in ix.shape))
            a = np.asarray(ix)
            if not D.is_int(a.dtype):
                raise TypeError(f"ref index of dtype {a.dtype}")
            if a.ndim == 0:
                v = int(a)
                out.append(v + size if wrap and -size <= v < 0 else v)
            else:
                a = a.astype(np.int64)
                if wrap:
                    a = np.where((a < 0) & (a >= -size), a + size, a)
                out.append(a)
    return tuple(out)


def _resolve(eqn, ref: Ref, flat_idx, tree):
    """(normalized index into ref.array, dtype the view is read as)."""
    transforms = list(jax.tree_util.tree_unflatten(tree, flat_idx)) if tree is not None else []
    transforms = [t for t in transforms if t is not None and not isinstance(t, _NEUTRAL)]
    wrap = ref.wraps_negative_indices
    if not transforms:
        return tuple(slice(0, n, 1) for n in ref.shape), ref.dtype
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

@register("get")
def get(eqn, ref, *flat_idx, tree=None):
    _check_ref(eqn, ref)
    index, dtype = _resolve(eqn, ref, flat_idx, tree)
    return _as_view(ref.read(index), dtype)


@register("swap")
def swap(eqn, ref, val, *flat_idx, tree=None):
    _check_ref(eqn, ref)
    index, dtype = _resolve(eqn, ref, flat_idx, tree)
    # `ref[i] = v` is a swap whose old value is unused (the jaxpr still binds it to a Var): a
    # swap is not a checked read of never-written memory; its old value there is the poison.
    tracked = isinstance(ref, TrackedRef)
    old = _as_view(Ref.read(ref, index) if tracked else ref.read(index), dtype)
    ref.write(index, _as_view(val, ref.dtype))
    return old


@register("addupdate")
def addupdate(eqn, ref, val, *flat_idx, tree=None):
    _check_ref(eqn, ref)
    index, dtype = _resolve(eqn, ref, flat_idx, tree)
    if dtype != ref.dtype:  # JAX: "addupdate (+=) is not supported on bitcast views"
        raise eqn.unsupported("addupdate through a bitcast view")
    ref.accumulate(index, np.asarray(val))
    return []


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
    return ref.read(tuple(slice(0, n, 1) for n in ref.shape))   # a read of every element


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
