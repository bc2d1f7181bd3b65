"""Rules: lax_structure (broadcast_in_dim, reshape, squeeze, transpose, rev, concatenate, pad, iota,
split, copy, stage, tile, stack, unstack, empty, empty2, tie).

All of these move data without arithmetic, so every result is bit-exact for every dtype (the
ml_dtypes narrow types included: NumPy copies their storage bytes). Rules return fresh, writable
arrays (never read-only broadcast views): a later state rule may wrap a result in a mutable Ref.

Not registered: ``zeros_like`` (a legacy primitive with no abstract evaluation rule: it cannot
appear in a jaxpr; interp/registry.py NO_RULE says so in coverage()).
"""
from __future__ import annotations

import jax
import numpy as np

from interp import dtypes
from interp.evaluator import STEP_HOOKS
from interp.registry import register
from interp.uninitialized import Unwritten, fill_uninitialized, track_unwritten


def _static_only(eqn, dynamic) -> None:
    """Dynamic-shape operands (jax's experimental dynamic shapes) are not implemented."""
    if dynamic:
        raise eqn.unsupported("structure/no-dynamic-shapes: dynamic shapes (extra shape operands) "
                              "are not supported")


@register("broadcast_in_dim")
def broadcast_in_dim(eqn, x, *dynamic, shape, broadcast_dimensions, sharding=None):
    _static_only(eqn, dynamic)
    x = np.asarray(x)
    # Put each operand dim at its output position (size 1 elsewhere), then broadcast.
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = x.shape[src]
    return np.array(np.broadcast_to(x.reshape(expanded), tuple(shape)), order="C")


@register("reshape")
def reshape(eqn, x, *dynamic, new_sizes, dimensions=None, sharding=None):
    _static_only(eqn, dynamic)
    x = np.asarray(x)
    if dimensions is not None:  # reshape of the transposed operand, row-major (XLA's order)
        x = np.transpose(x, dimensions)
    return np.array(np.reshape(x, tuple(new_sizes), order="C"))


@register("squeeze")
def squeeze(eqn, x, *, dimensions):
    return np.array(np.asarray(x).reshape(eqn.out_aval.shape), order="C")


@register("transpose")
def transpose(eqn, x, *, permutation):
    return np.array(np.transpose(x, permutation), order="C")


@register("rev")
def rev(eqn, x, *, dimensions):
    x = np.asarray(x)
    return np.array(np.flip(x, tuple(dimensions)), order="C")


@register("concatenate")
def concatenate(eqn, *xs, dimension):
    return np.concatenate([np.asarray(x) for x in xs], axis=dimension)


@register("pad")
def pad(eqn, x, padding_value, *, padding_config):
    """lo/hi padding (negative crops) and interior padding between elements (XLA Pad)."""
    x = np.asarray(x)
    # First pad with the non-negative parts of lo/hi, then crop the negative ones.
    full_shape, place, crop = [], [], []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        if interior < 0:
            raise eqn.unsupported(f"pad/c3: negative interior padding {interior}")
        body = n + max(n - 1, 0) * interior
        size = max(lo, 0) + body + max(hi, 0)
        full_shape.append(size)
        place.append(slice(max(lo, 0), max(lo, 0) + body, interior + 1))
        crop.append(slice(max(-lo, 0), size - max(-hi, 0)))
    out = np.full(full_shape, np.asarray(padding_value, dtype=x.dtype), dtype=x.dtype)
    out[tuple(place)] = x
    return np.array(out[tuple(crop)], order="C")


@register("iota")
def iota(eqn, *dynamic, dtype, shape, dimension, sharding=None):
    """0, 1, 2... along ``dimension``, converted to ``dtype`` as XLA converts an integer: integers
    wrap modulo 2**bits (int8 iota of 300 reaches 127, -128, ...), floats round to nearest even
    (and overflow as that float type's conversion does)."""
    _static_only(eqn, dynamic)
    dtype = np.dtype(dtype)
    n = shape[dimension]
    if dtypes.is_int(dtype):
        line = np.arange(n, dtype=np.int64).astype(dtype)  # two's complement wrap-around
    elif dtypes.is_float(dtype) or dtypes.is_complex(dtype):
        if n > 2 ** 53:
            raise eqn.unsupported("iota longer than 2**53 (not exact in float64)")
        with np.errstate(over="ignore"):
            line = np.arange(n, dtype=np.float64).astype(dtype)  # exact integers, one rounding
    else:
        raise eqn.unsupported(f"iota/c4: iota of dtype {dtype}")
    view = [1] * len(shape)
    view[dimension] = n
    return np.array(np.broadcast_to(line.reshape(view), tuple(shape)), order="C")


@register("split")
def split(eqn, x, *, sizes, axis):
    x = np.asarray(x)
    cuts = np.cumsum(sizes)[:-1]
    return [np.array(part, order="C") for part in np.split(x, cuts, axis=axis)]


@register("copy")
def copy(eqn, x):
    return np.array(x, order="C", copy=True)


@register("stage")
def stage(eqn, x):
    # lax.stage: the identity (lax.py stage_p: impl returns x, lowering returns the operand).
    # Tracing never records it (every trace's stage_value lifts the value without an equation);
    # a jaxpr built by hand may hold it.
    return np.array(x, copy=True)


@register("tile")
def tile(eqn, x, *, reps):
    return np.tile(np.asarray(x), tuple(reps))


@register("stack")
def stack(eqn, *xs, axis):
    return np.stack([np.asarray(x) for x in xs], axis=axis)


@register("unstack")
def unstack(eqn, x, *, axis):
    x = np.asarray(x)
    return [np.array(np.take(x, i, axis=axis), order="C") for i in range(x.shape[axis])]


def uninitialized_fill(eqn, shape, dtype) -> np.ndarray:
    """The contents of never-written memory under the ``uninitialized`` option
    (interp/uninitialized.py: the same poison values as Pallas buffers)."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        raise eqn.unsupported(f"empty/c4: uninitialized value of extended dtype {dtype}")
    try:
        return fill_uninitialized(shape, dtype, eqn.options.uninitialized)
    except NotImplementedError as e:
        raise eqn.unsupported(str(e)) from None


# --- lax.empty / empty2 ------------------------------------------------------------------------
# JAX emits `empty` for lax.empty, jnp.empty (JAX 0.12; 0.10.2's is zeros), Pallas mpmd's output
# buffers (new_ref(lax.empty(...))), and when run_state's empty_ref is discharged; `empty2` only
# inside scan's lowering (_scan_impl), never in a traced jaxpr.
#
# Under uninitialized="raise" the result is an `Unwritten` value (interp/uninitialized.py: the
# poison data and a mask of the elements written so far), tracked through the program by the plan
# hook installed here (uninitialized.track_unwritten).
STEP_HOOKS.append(track_unwritten)


def _empty_value(eqn, shape, dtype):
    data = uninitialized_fill(eqn, shape, dtype)
    if eqn.options.uninitialized != "raise" or data.size == 0:
        return data
    return Unwritten(data, np.zeros(shape, bool), f"{eqn.name} at {_where(eqn)}")


def _where(eqn) -> str:
    try:
        from jax._src import source_info_util
        return source_info_util.summarize(eqn.source_info)
    except Exception:     # (source information is best effort)
        return "unknown location"


@register("empty")
def empty(eqn, *, shape, dtype, out_sharding=None):
    return _empty_value(eqn, tuple(shape), dtype)


@register("empty2")
def empty2(eqn, *, dtype, memory_space=None):
    return _empty_value(eqn, (), dtype)


@register("tie")
def tie(eqn, x, y):
    """tie(x, y) is y; x only orders effects (jax/_src/lax/lax.py tie_p)."""
    return y
