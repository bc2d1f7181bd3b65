"""Rules: Pallas Triton dialect (``jax.experimental.pallas.triton``): atomics, compare-and-swap,
the contiguity hint and the thread barrier. Primitives every Pallas lowering shares (loads and
stores with masks, program ids, ``multiple_of``) stay in ``interp/rules/pallas.py``.
"""
from __future__ import annotations

import numpy as np

from ..registry import register
from .pallas import _target


@register("max_contiguous")
def max_contiguous(eqn, x, *, values):
    # Triton's contiguity hint for vectors of indices; the value unchanged.
    return x


@register("debug_barrier")
def debug_barrier(eqn):
    # A thread barrier inside one program: nothing observable in values.
    return []


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, val: val}


@register("atomic_rmw", partial="float max/min propagate NaN (Triton's integer-trick float "
                                "min/max leaves NaN handling undefined)")
def atomic_rmw(eqn, *flat, args_tree, atomic_type):
    # One kernel instance runs at a time, so an atomic is a read-modify-write; lanes that hit the
    # same element apply in row-major lane order (each addition rounded), and each lane returns
    # the value it saw.
    ref, transforms, val, mask = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    op = _ATOMIC[str(getattr(atomic_type, "value", atomic_type)).lower()]
    shape = eqn.out_aval.shape
    lanes = np.ones(shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
    coords = _coords(target, index, lanes)
    val = np.broadcast_to(np.asarray(val, target.dtype), shape)[lanes]
    old = target.masked_read(index, lanes, None) if mask is not None else target.read(index)
    flat_idx = np.ravel_multi_index(coords, target.shape) if coords else np.zeros(1, np.int64)
    seen = np.empty(val.shape, target.dtype)
    if len(np.unique(flat_idx)) == flat_idx.size:
        seen[...] = target.array[coords]
        new = op(seen, val).astype(target.dtype)
    else:
        seen_l = []
        current = {}
        for lane, pos in enumerate(flat_idx.tolist()):
            before = current.get(pos, target.array.reshape(-1)[pos])
            seen_l.append(before)
            current[pos] = op(before, val[lane]).astype(target.dtype)
        seen[...] = seen_l
        new = np.array([current[p] for p in flat_idx.tolist()], target.dtype)
    target.masked_write(index, _scatter(shape, lanes, new, target.dtype), lanes)
    out = np.array(old, copy=True)
    out[lanes] = seen
    return out.reshape(shape)


def _coords(ref, index, lanes):
    from ..pallas.memory import _selected_coords
    return _selected_coords(ref.shape, index, lanes)


def _scatter(shape, lanes, values, dtype):
    out = np.zeros(shape, dtype)
    out[lanes] = values
    return out


@register("atomic_cas")
def atomic_cas(eqn, ref, cmp, val):
    old = ref.read(())
    if old == cmp:
        ref.write((), val)
    return np.asarray(old)


