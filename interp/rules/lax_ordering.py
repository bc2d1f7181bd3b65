"""Rules: sort, top_k, approx_top_k.

sort orders lexicographically by its first ``num_keys`` operands with JAX's comparator
(jax/_src/lax/lax.py ``_sort_lt_comparator``): floats are canonicalised first (-0.0 -> +0.0, every
NaN -> +NaN), then compared in IEEE total order, so -inf < ... < -0.0 == +0.0 < ... < inf < NaN with
all NaN equal; complex keys compare (real, imag). Ties keep their input order (stable).
top_k returns the k largest along ``axis`` in descending order, ties by lowest index first.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..registry import register
from ..numerics import float_key, widen_narrow_float


def _sort_keys(x: np.ndarray) -> list[np.ndarray]:
    """Integer/bool arrays ordering ``x`` as JAX's sort comparator does (most significant first)."""
    if dtypes.is_complex(x.dtype):
        return _sort_keys(np.ascontiguousarray(x.real)) + _sort_keys(np.ascontiguousarray(x.imag))
    if dtypes.is_float(x.dtype):
        xc = widen_narrow_float(x)
        xc = np.where(xc == 0, np.zeros((), xc.dtype), xc)   # -0.0 == +0.0
        return [float_key(xc, nan_key="max")]                # every NaN equal, after +inf
    if x.dtype in dtypes.ML_INTS or x.dtype in dtypes.ML_UINTS:
        return [x.astype(np.int8)]
    return [x]


@register("sort", partial="is_stable=False is evaluated stably (one of the orders XLA may give)")
def sort(eqn, *operands, dimension, is_stable, num_keys):
    ops = [np.moveaxis(np.asarray(x), dimension, -1) for x in operands]
    keys = [k for x in ops[:num_keys] for k in _sort_keys(x)]
    # np.lexsort is stable and sorts by its last key first.
    order = np.lexsort(keys[::-1], axis=-1) if ops[0].ndim else np.zeros((), np.int64)
    return [np.ascontiguousarray(np.moveaxis(np.take_along_axis(x, order, axis=-1), -1, dimension))
            if x.ndim else x for x in ops]


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose stable ascending sort is top_k's descending order (XLA TopK compares floats
    in IEEE total order: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN)."""
    if dtypes.is_float(x.dtype):
        xc = widen_narrow_float(x)
        itype = np.int32 if xc.dtype == np.float32 else np.int64
        i = np.ascontiguousarray(xc).view(itype)
        key = np.where(i < 0, i ^ np.array(np.iinfo(itype).max, itype), i)
        return ~key
    if dtypes.is_bool(x.dtype):
        return ~x.astype(np.int8)
    if x.dtype in dtypes.ML_INTS or x.dtype in dtypes.ML_UINTS:
        return ~x.astype(np.int8)
    return ~x   # bitwise not reverses the order of every integer type without overflow


def _top_k(eqn, operand, k, axis, key_fn):
    x = np.moveaxis(np.asarray(operand), axis, -1)
    if dtypes.is_complex(x.dtype):
        raise eqn.unsupported("top_k of complex values")
    order = np.argsort(key_fn(x), axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return [np.ascontiguousarray(np.moveaxis(values, -1, axis)),
            np.ascontiguousarray(np.moveaxis(order, -1, axis)).astype(eqn.out_avals[1].dtype)]


@register("top_k")
def top_k(eqn, operand, *, k, axis=None, is_stable=True):
    # JAX 0.10.2 has no is_stable (always stable); axis defaults to the last dimension.
    return _top_k(eqn, operand, k, np.ndim(operand) - 1 if axis is None else axis, _descending_key)


@register("approx_top_k")
def approx_top_k(eqn, operand, *, k, reduction_dimension, recall_target, is_max_k,
                 reduction_input_size_override, aggregate_to_topk):
    # Off TPU, XLA's ApproxTopK is exact (recall_target only permits less). The reference
    # defines it as a stable sort with JAX's sort order (-0.0 == +0.0, every NaN above +inf) and a
    # slice; XLA:CPU agrees except for the order of NaN and signed-zero ties, which depends on k
    # and on the jaxlib version (spec/lax_ordering.py). Without aggregate_to_topk, CPU/GPU still
    # return exactly k candidates.
    axis = reduction_dimension % np.ndim(operand)
    if eqn.out_aval.shape[axis] != k:
        raise eqn.unsupported("approx_top_k/c4: approx_top_k returning a TPU-sized candidate set")

    def key_fn(x):
        (key,) = _sort_keys(x)
        return ~key if is_max_k else key
    return _top_k(eqn, operand, k, axis, key_fn)
