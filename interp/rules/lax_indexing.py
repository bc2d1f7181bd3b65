"""Rules: lax_indexing (slice, dynamic_slice, dynamic_update_slice, gather, scatter and its
variants scatter-add/-sub/-mul/-min/-max).

Semantics are XLA's (operation semantics of Slice, DynamicSlice, DynamicUpdateSlice, Gather,
Scatter) plus what JAX's lowering adds per GatherScatterMode (jax/_src/lax/slicing.py
_gather_lower, _gather_fill, _scatter_lower, _clamp_scatter_indices); spec/lax_indexing.py states
every rule with its source. Index values are compared and clamped as mathematical integers in their
own dtype (signed or unsigned, any width), which is what XLA:CPU does.

Gather and scatter are vectorised: a start position per batch element and a window offset grid
give flat operand indices; scatters then apply their updates in XLA:CPU's sequential order
(scatter-index row-major, then window row-major), see ``_apply_updates``.
"""
from __future__ import annotations

import numpy as np

from interp import dtypes
from interp.registry import register

_INT32_MAX = 2 ** 31 - 1


# ---- index helpers -----------------------------------------------------------------------------

def _clamped(idx, lo: int, hi: int) -> np.ndarray:
    """Integer index values of any integer dtype, clamped as mathematical integers to [lo, hi],
    as int64 (a uint64 index above 2**63 is clamped before it could wrap)."""
    idx = np.asarray(idx)
    if idx.dtype == np.uint64:
        idx = np.minimum(idx, np.uint64(max(hi, 0)))
    return np.clip(idx.astype(np.int64), lo, hi)


def _wrap_to_int(idx, bits: int) -> np.ndarray:
    """convert_element_type of integer indices to a signed int of ``bits`` (two's complement wrap),
    returned as int64 values."""
    wide = np.asarray(idx).astype(np.int64)  # uint64 >= 2**63 wraps to negative, as a cast does
    return wide.astype(np.int32).astype(np.int64) if bits == 32 else wide


def _strides(shape) -> np.ndarray:
    """Row-major element strides of ``shape`` (int64)."""
    out = np.ones(len(shape), np.int64)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


def _offset_grid(dims, sizes, strides) -> np.ndarray:
    """Flat offsets of a window: sum over ``dims`` of arange(size) * stride, shaped ``sizes``."""
    grid = np.zeros([sizes[d] for d in dims], np.int64)
    for axis, d in enumerate(dims):
        view = [1] * len(dims)
        view[axis] = sizes[d]
        grid = grid + (np.arange(sizes[d], dtype=np.int64) * strides[d]).reshape(view)
    return grid


def _starts(batch_shape, rank, index_map, index_values, operand_batching_dims,
            indices_batching_dims) -> np.ndarray:
    """Window start per batch element: shape batch_shape + (rank,), int64.

    Dimension ``index_map[k]`` starts at ``index_values[..., k]``; an operand batching dimension
    starts at the position of its paired indices batching dimension; every other dimension at 0.
    """
    start = np.zeros(tuple(batch_shape) + (rank,), np.int64)
    for k, d in enumerate(index_map):
        start[..., d] = index_values[..., k]
    for od, idim in zip(operand_batching_dims, indices_batching_dims):
        view = [1] * len(batch_shape)
        view[idim] = batch_shape[idim]
        start[..., od] = np.arange(batch_shape[idim], dtype=np.int64).reshape(view)
    return start


def _mode_name(eqn, mode) -> str:
    name = getattr(mode, "name", None)
    if name not in ("CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS"):
        raise eqn.unsupported(f"gather/c6: gather/scatter mode {mode!r}")
    return name


# ---- slice, dynamic_slice, dynamic_update_slice ------------------------------------------------

@register("slice")
def slice_(eqn, x, *, start_indices, limit_indices, strides=None):
    strides = strides or (1,) * len(start_indices)
    index = tuple(slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))
    return np.array(np.asarray(x)[index], order="C")


def _clamped_window(eqn, shape, sizes, starts) -> tuple:
    """XLA DynamicSlice/DynamicUpdateSlice: each start is clamped to [0, dim - size], so the window
    is always in bounds (any integer dtype per start, unsigned included)."""
    if len(starts) != len(shape):
        raise eqn.unsupported("dynamic_slice/c4: dynamic shapes (extra size operands) are not "
                              "supported")
    return tuple(slice(int(s), int(s) + n) for s, n in
                 zip((_clamped(st, 0, dim - n) for st, dim, n in zip(starts, shape, sizes)), sizes))


@register("dynamic_slice")
def dynamic_slice(eqn, x, *starts, slice_sizes):
    x = np.asarray(x)
    return np.array(x[_clamped_window(eqn, x.shape, slice_sizes, starts)], order="C")


@register("dynamic_update_slice")
def dynamic_update_slice(eqn, x, update, *starts):
    out = np.array(x, order="C", copy=True)
    update = np.asarray(update)
    out[_clamped_window(eqn, out.shape, update.shape, starts)] = update
    return out


# ---- gather ------------------------------------------------------------------------------------

def _fill_value(eqn, fill_value, dtype) -> np.ndarray:
    """The FILL_OR_DROP fill value as a ``dtype`` scalar. jax.lax.gather resolves None to NaN
    (inexact), the minimum (signed), the maximum (unsigned) or True (bool); a value that ``dtype``
    cannot hold exactly is not guessed at."""
    dtype = np.dtype(dtype)
    if fill_value is None:
        if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
            fill_value = np.nan
        elif dtypes.is_signed(dtype):
            fill_value = int(dtypes.iinfo(dtype).min)
        elif dtypes.is_unsigned(dtype):
            fill_value = int(dtypes.iinfo(dtype).max)
        elif dtypes.is_bool(dtype):
            fill_value = True
    value = np.asarray(fill_value)
    with np.errstate(all="ignore"):
        out = value.astype(dtype)
    if (dtypes.is_int(dtype) or dtypes.is_bool(dtype)) and out.astype(value.dtype) != value:
        raise eqn.unsupported(f"gather/c4: fill_value {fill_value!r} is not exactly representable in "
                              f"{dtype}")
    return out


@register("gather")
def gather(eqn, operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value=None,
           unique_indices=False, indices_are_sorted=False):
    """XLA Gather. CLIP and PROMISE_IN_BOUNDS: each start index is clamped to
    [0, dim - slice_size] (XLA's gather clamps; JAX adds nothing). FILL_OR_DROP (JAX _gather_fill):
    indices are first converted to int32 (int64 if a dimension exceeds int32), then a batch element
    whose start is outside [0, dim - slice_size] in any indexed dimension gives ``fill_value`` for
    its whole window. ``unique_indices``/``indices_are_sorted`` are hints that do not change results.
    """
    mode = _mode_name(eqn, mode)
    dn = dimension_numbers
    operand, indices = np.asarray(operand), np.asarray(indices)
    out_shape = tuple(eqn.out_aval.shape)
    if 0 in out_shape:
        return np.zeros(out_shape, operand.dtype)
    shape, sizes = operand.shape, tuple(slice_sizes)
    batch_shape = indices.shape[:-1]
    index_map = tuple(dn.start_index_map)
    in_bounds = None
    if mode == "FILL_OR_DROP":
        bits = 64 if any(d > _INT32_MAX for d in shape) else 32
        values = _wrap_to_int(indices, bits)
        upper = np.array([shape[d] - sizes[d] for d in index_map], np.int64)
        in_bounds = np.all((values >= 0) & (values <= upper), axis=-1)
    else:
        values = indices
    values = np.stack([_clamped(values[..., k], 0, shape[d] - sizes[d])
                       for k, d in enumerate(index_map)], axis=-1) if index_map else \
        np.zeros(batch_shape + (0,), np.int64)
    strides = _strides(shape)
    start = _starts(batch_shape, len(shape), index_map, values, dn.operand_batching_dims,
                    dn.start_indices_batching_dims)
    window = [d for d in range(len(shape))
              if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    flat = (start @ strides).reshape(batch_shape + (1,) * len(window)) + \
        _offset_grid(window, sizes, strides)
    result = np.asarray(operand.reshape(-1)[flat])  # batch dims first, then window dims
    if in_bounds is not None:
        result[~in_bounds] = _fill_value(eqn, fill_value, operand.dtype)
    nb = len(batch_shape)
    return np.array(np.moveaxis(result, list(range(nb, nb + len(window))), list(dn.offset_dims)),
                    order="C")


# ---- scatter -----------------------------------------------------------------------------------

def _scatter_targets(eqn, operand_shape, indices, updates, dn, mode):
    """(flat operand positions, update values) in XLA:CPU's application order, out-of-bounds
    windows removed (or clamped in CLIP mode)."""
    rank = len(operand_shape)
    batch_shape = indices.shape[:-1]
    nb = len(batch_shape)
    window = [d for d in range(rank)
              if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    sizes = [1] * rank
    for d, ud in zip(window, dn.update_window_dims):
        sizes[d] = updates.shape[ud]
    # Updates as batch dims (in order) followed by window dims (in order).
    updates = np.moveaxis(updates, list(dn.update_window_dims),
                          list(range(nb, nb + len(window))))
    index_map = tuple(dn.scatter_dims_to_operand_dims)
    upper = [operand_shape[d] - sizes[d] for d in index_map]
    if mode == "CLIP":  # JAX _clamp_scatter_indices, then an in-bounds XLA scatter
        values = [_clamped(indices[..., k], 0, hi) for k, hi in enumerate(upper)]
        keep = None
    else:  # FILL_OR_DROP and PROMISE_IN_BOUNDS: XLA skips a window not entirely in bounds
        values = [_clamped(indices[..., k], -1, hi + 1) for k, hi in enumerate(upper)]
        keep = np.ones(batch_shape, bool)
        for v, hi in zip(values, upper):
            keep &= (v >= 0) & (v <= hi)
    values = np.stack(values, axis=-1) if values else np.zeros(batch_shape + (0,), np.int64)
    strides = _strides(operand_shape)
    start = _starts(batch_shape, rank, index_map, values, dn.operand_batching_dims,
                    dn.scatter_indices_batching_dims)
    flat = (start @ strides).reshape(batch_shape + (1,) * len(window)) + \
        _offset_grid(window, sizes, strides)
    if keep is not None:
        flat, updates = flat[keep], updates[keep]
    return flat.reshape(-1), updates.reshape(-1)


def _last_writes(targets, size):
    """(written positions, index into ``targets`` of the last write to each): the largest update
    number per target (ufunc.at is unbuffered and maximum order-independent, so this is exact)."""
    owner = np.full(size, -1, np.int64)
    np.maximum.at(owner, targets, np.arange(targets.size, dtype=np.int64))
    written = np.flatnonzero(owner >= 0)
    return written, owner[written]


def _fix_zero_signs(out, orig, targets, values, want_negative: bool):
    """min/max over floats order -0.0 below +0.0 (XLA); NumPy's minimum/maximum do not. A zero
    result is -0.0 for max only if no +0.0 took part, for min if any -0.0 took part."""
    def hit(v):
        return (v == 0) & (np.signbit(v) == want_negative)
    any_hit = hit(orig).copy()
    np.logical_or.at(any_hit, targets, hit(values))
    zero = out == 0
    negative = any_hit if want_negative else ~any_hit
    out[zero] = np.where(negative[zero], -0.0, 0.0)


def _apply_updates(eqn, kind, out, targets, values, update_jaxpr=None, update_consts=()):
    """Apply scatter updates to ``out`` (flat, modified in place) one after the other in the given
    order, each combination rounded to the dtype (XLA:CPU's sequential scatter loop)."""
    dtype = out.dtype
    if kind == "set":
        written, last = _last_writes(targets, out.size)
        out[written] = values[last]
        return
    if kind == "apply" or (dtypes.is_complex(dtype) and kind in ("mul", "min", "max")):
        # A general update computation (generic scatter), or a complex combiner whose rounding
        # (mul) or order (lexicographic min/max) the elementwise rules define: evaluate the
        # equation's scalar update_jaxpr once per update, in order (slow path, rarely used).
        if update_jaxpr is None:
            raise eqn.unsupported(f"scatter-{kind} of {dtype} without an update_jaxpr")
        plan = eqn.plan(update_jaxpr)
        consts = list(update_consts)
        for t, v in zip(targets.tolist(), values):
            out[t] = np.asarray(plan.run(consts, [np.asarray(out[t]), np.asarray(v)])[0], dtype)
        return
    if dtypes.is_bool(dtype):  # JAX allows scatter, scatter-min and scatter-max on bool
        ufunc = {"min": np.logical_and, "max": np.logical_or}.get(kind)
        if ufunc is None:
            raise eqn.unsupported(f"scatter-{kind} of bool")
        ufunc.at(out, targets, values)
        return
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
             "min": np.minimum, "max": np.maximum}[kind]
    if dtype in dtypes.ML_INTS + dtypes.ML_UINTS:
        # int2/int4: wrap-around arithmetic in int64 reduces to the same value modulo 2**bits.
        wide = out.astype(np.int64)
        ufunc.at(wide, targets, values.astype(np.int64))
        out[...] = wide.astype(dtype)
        return
    if dtypes.is_float(dtype) and kind in ("min", "max"):
        # min/max select one input, so computing in float64 is exact.
        wide, vals = out.astype(np.float64), values.astype(np.float64)
        orig = wide.copy()
        with np.errstate(invalid="ignore"):
            ufunc.at(wide, targets, vals)
        if np.any(vals == 0):  # otherwise every zero result is an untouched operand zero
            _fix_zero_signs(wide, orig, targets, vals, want_negative=(kind == "min"))
        out[...] = wide.astype(dtype)
        return
    # Native ints wrap; float16/32/64 and complex add/sub round each step in the dtype; the
    # ml_dtypes floats compute in float32 and round once (exact for p <= 11: 24 >= 2p+2).
    with np.errstate(all="ignore"):
        ufunc.at(out, targets, values)


def _is_set_jaxpr(jaxpr) -> bool:
    """An update computation ``lambda old, new: new``."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    return (not jaxpr.eqns and len(jaxpr.invars) == 2 and len(jaxpr.outvars) == 1
            and jaxpr.outvars[0] is jaxpr.invars[1])


def _scatter(kind):
    def rule(eqn, operand, indices, updates, *, dimension_numbers, mode, update_jaxpr=None,
             update_consts=(), indices_are_sorted=False, unique_indices=False):
        mode = _mode_name(eqn, mode)
        out = np.array(operand, order="C", copy=True)
        if out.size == 0 or np.size(updates) == 0:
            return out
        targets, values = _scatter_targets(eqn, out.shape, np.asarray(indices),
                                           np.asarray(updates), dimension_numbers, mode)
        how = kind
        if kind == "set" and update_jaxpr is not None and not _is_set_jaxpr(update_jaxpr):
            how = "apply"
        flat = out.reshape(-1)
        _apply_updates(eqn, how, flat, targets, values, update_jaxpr, update_consts)
        return out
    rule.__name__ = f"scatter_{kind}"
    rule.__doc__ = (f"XLA Scatter with combiner '{kind}'; duplicates applied sequentially in "
                    f"XLA:CPU's order (see spec/lax_indexing.py).")
    return rule


register("scatter")(_scatter("set"))
register("scatter-add")(_scatter("add"))
register("scatter-sub")(_scatter("sub"))
register("scatter-mul")(_scatter("mul"))
register("scatter-min")(_scatter("min"))
register("scatter-max")(_scatter("max"))
