"""Rules: reductions (reduce_*, generic reduce, argmax/argmin), windowed reductions
(reduce_window*, select_and_scatter_add, select_and_gather_add) and cumulative reductions (cum*).

Float sums are *correctly rounded*: the result of every output element is the exact sum of its
terms rounded once to the output dtype (interp/numerics.py :func:`certified_round`, which the
contraction family shares). Products (reduce_prod/cumprod) are correctly rounded the same way.
Integer results wrap around in the output type. max/min propagate NaN and order -0.0 below +0.0 (XLA's max/min).
"""
from __future__ import annotations

import math

import jax
import jax.extend.core as jcore
import numpy as np

from .. import dtypes
from ..numerics import (F32, F64, UNIT, certified_round, float_key, float_sum_last, key_to_float, mant_exp,
                        refine_sums, round_exact, round_float, sum_error_bound, wide_type, widen_narrow_float, wrap_int,
                        ziv)
from ._windows import window_indices, windows
from ..registry import register


def move_last(x: np.ndarray, axes) -> np.ndarray:
    """``x`` with ``axes`` moved to the end and flattened into one axis."""
    axes = tuple(a % x.ndim for a in axes) if x.ndim else ()
    keep = [a for a in range(x.ndim) if a not in axes]
    x = np.transpose(x, keep + list(axes))
    # (the reduced size spelled out: -1 is ambiguous when a kept dimension is 0)
    return x.reshape(x.shape[:len(keep)] + (math.prod(x.shape[len(keep):]),))


def _int_wide(dtype):
    return np.int64 if dtypes.is_signed(dtype) else np.uint64


def sum_last(eqn, x: np.ndarray, out_dtype) -> np.ndarray:
    """Sum over the last axis in ``out_dtype``: wrapping for integers, correctly rounded for
    floats (complex: each part)."""
    out_dtype = np.dtype(out_dtype)
    if dtypes.is_int(out_dtype):
        return wrap_int(np.sum(x.astype(_int_wide(x.dtype)), axis=-1), out_dtype)
    if dtypes.is_float(out_dtype):
        return float_sum_last(x, out_dtype)
    if dtypes.is_complex(out_dtype):
        part = F32 if out_dtype == np.complex64 else F64
        out = np.empty(x.shape[:-1], out_dtype)
        out.real = float_sum_last(np.ascontiguousarray(x.real), part)
        out.imag = float_sum_last(np.ascontiguousarray(x.imag), part)
        return out
    raise eqn.unsupported(f"sum of {out_dtype}")


# --------------------------------------------------------------------------------------------
# max/min: ordering keys (interp/numerics.py float_key) with -0.0 < +0.0 that propagate NaN.

def extremum(eqn, x: np.ndarray, kind: str, reduce) -> np.ndarray:
    """``reduce(keys)`` where keys order x as max/min need; ``kind`` is "max" or "min"."""
    if dtypes.is_float(x.dtype):
        xc = widen_narrow_float(x)
        return key_to_float(reduce(float_key(xc, nan_key=kind)), x.dtype)
    if dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype):
        if x.dtype in dtypes.ML_INTS or x.dtype in dtypes.ML_UINTS:
            return reduce(x.astype(np.int8)).astype(x.dtype)
        return reduce(x)
    if dtypes.is_complex(x.dtype):
        return _complex_extremum(x, kind, reduce)
    raise eqn.unsupported(f"{kind} of {x.dtype}")


def _complex_extremum(x: np.ndarray, kind: str, reduce) -> np.ndarray:
    """Complex max/min as JAX lowers them (jax/_src/interpreters/mlir.py _minmax_hlo): pairs
    compared lexicographically, real part first, the imaginary part where the real parts are equal
    (IEEE ==, so -0.0 ties +0.0; the reference breaks such ties with -0.0 < +0.0, as real max).

    The comparator is a total order only without NaN: XLA then picks the winner of a reduction
    whose order it leaves unspecified (XLA:CPU folds sequentially for short rows and in a tree for
    long ones, measured). Where a NaN can decide the result (a NaN real part in the reduced set,
    or a NaN imaginary part on an element whose real part ties the extreme one) the result is
    undefined: UndefinedBehaviorError. Otherwise: each value's dense rank in the
    lexicographic order, reduced with ``reduce`` (max/min, accumulate, over windows), mapped back."""
    # XLA folds the init value in (JAX's -inf+0j / +inf+0j is no identity of this order: it beats
    # -inf-1j for max; measured on XLA:CPU): it leads every row, dropped again from prefix results.
    init = np.full(x.shape[:-1] + (1,), -np.inf if kind == "max" else np.inf, x.dtype)
    n = x.shape[-1]
    x = np.concatenate([init, x], axis=-1)
    re = float_key(np.ascontiguousarray(x.real), nan_key=kind)
    im = float_key(np.ascontiguousarray(x.imag), nan_key=kind)
    flat_re, flat_im = re.ravel(), im.ravel()
    order = np.lexsort((flat_im, flat_re))
    new = np.ones(order.size, bool)
    new[1:] = (flat_re[order][1:] != flat_re[order][:-1]) | (flat_im[order][1:] != flat_im[order][:-1])
    rank = np.empty(order.size, np.int64)
    rank[order] = np.cumsum(new) - 1
    values = x.ravel()[order[new]]            # value of each rank
    picked = reduce(rank.reshape(x.shape))
    with np.errstate(invalid="ignore"):
        nan_re = np.isnan(x.real)
        nan_im = np.isnan(x.imag) & ~nan_re
    if nan_re.any() or nan_im.any():
        # Which outputs a NaN reaches: reduce 0/1 flags (as extremes in ``reduce``'s direction).
        hit, miss = (1, 0) if kind == "max" else (0, 1)
        reached = reduce(np.where(nan_re, hit, miss).astype(np.int8)) == hit
        # A NaN imaginary part matters where its real key ties the extreme real key of the
        # values without NaN (ties among NaN imaginary parts only differ in the NaN's bits).
        lowest = np.iinfo(re.dtype).min if kind == "max" else np.iinfo(re.dtype).max
        re = float_key(np.ascontiguousarray(np.where(x.real == 0, 0, x.real)), nan_key=kind)  # -0.0 ties +0.0
        best_re = reduce(np.where(nan_re | nan_im, lowest, re))
        best_nan_im = reduce(np.where(nan_im, re, lowest))
        reached |= (best_nan_im == best_re) & (best_nan_im != lowest)
        if np.any(reached):
            from ..errors import UndefinedBehaviorError
            raise UndefinedBehaviorError(
                f"complex {kind} over values holding NaN: XLA compares complex values "
                "lexicographically with IEEE comparisons, so the result depends on the reduction "
                "order XLA leaves unspecified (complex_extremum/nan-undefined)")
    out = values[picked]
    return out[..., 1:] if out.ndim == x.ndim and out.shape[-1] == n + 1 else out


# --------------------------------------------------------------------------------------------
# reduce_* over axes

def _lowest(dtype):
    if dtypes.is_float(dtype) or dtypes.is_complex(dtype):   # complex: -inf + 0j, JAX's max identity
        return -np.inf
    return False if dtypes.is_bool(dtype) else int(dtypes.iinfo(dtype).min)


def _highest(dtype):
    if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
        return np.inf
    return True if dtypes.is_bool(dtype) else int(dtypes.iinfo(dtype).max)



@register("reduce_sum")
def reduce_sum(eqn, x, *, axes, out_sharding=None):   # (placement only; plgpu.sum calls it without)
    return np.asarray(sum_last(eqn, move_last(np.asarray(x), axes), eqn.out_dtype))


def _reduce_extremum(kind):
    np_fn, fill = (np.max, _lowest) if kind == "max" else (np.min, _highest)

    def rule(eqn, x, *, axes, out_sharding=None):   # (out_sharding: JAX 0.11 on)
        x = move_last(np.asarray(x), axes)
        if x.shape[-1] == 0:     # XLA's init value: -inf / the lowest integer for max
            return np.full(x.shape[:-1], fill(x.dtype), x.dtype)
        if x.shape[-1] == 1 and dtypes.is_complex(x.dtype):
            # XLA's simplifier turns a reduction of one element into that element: the init
            # value is not folded in (matters for complex, where it is no identity; measured).
            return x[..., 0].copy()
        return np.asarray(extremum(eqn, x, kind, lambda k: np_fn(k, axis=-1)))
    return rule


register("reduce_max")(_reduce_extremum("max"))
register("reduce_min")(_reduce_extremum("min"))


def _bitwise_reduce(ufunc, logical, identity):
    def rule(eqn, x, *, axes):
        x = move_last(np.asarray(x), axes)
        if dtypes.is_bool(x.dtype):
            return np.asarray(logical.reduce(x, axis=-1, initial=bool(identity)))
        if not dtypes.is_int(x.dtype):
            raise eqn.unsupported(f"bitwise reduction of {x.dtype}")
        wide = _int_wide(x.dtype)
        init = np.array(identity).astype(wide)
        return np.asarray(wrap_int(ufunc.reduce(x.astype(wide), axis=-1, initial=init), x.dtype))
    return rule


register("reduce_and")(_bitwise_reduce(np.bitwise_and, np.logical_and, -1))
register("reduce_or")(_bitwise_reduce(np.bitwise_or, np.logical_or, 0))
register("reduce_xor")(_bitwise_reduce(np.bitwise_xor, np.logical_xor, 0))


# ----- products: exact, correctly rounded

def _exact_product(v: np.ndarray) -> tuple[int, int]:
    ms, es = mant_exp(v)
    n = 1
    for m in ms:
        n *= m
    return n, sum(es)


def float_products(x: np.ndarray, out_dtype, cumulative: bool) -> np.ndarray:
    """Correctly rounded (prefix) products over the last axis of a real float array.

    The product is carried as mantissa * 2**E (frexp after every step, so it cannot overflow or
    underflow); each step rounds once in the wide type, so the relative error after k factors
    is below gamma_k. Zeros, infinities and NaN follow IEEE (sign = xor of signs)."""
    wide = wide_type(x.dtype, x.dtype)
    xw = x.astype(wide)
    n = x.shape[-1]
    if n == 0:
        return np.ones(x.shape if cumulative else x.shape[:-1], out_dtype)
    shape = x.shape if cumulative else x.shape[:-1]
    m = np.ones(x.shape[:-1], wide)
    e = np.zeros(x.shape[:-1], np.int64)
    ms, es = np.empty(shape, wide), np.empty(shape, np.int64)
    for k in range(n):
        m, de = np.frexp(m * xw[..., k])
        e = e + de
        if cumulative:
            ms[..., k], es[..., k] = m, e
    if not cumulative:
        ms, es = m, e
    ks = (np.arange(1, n + 1) if cumulative else n) * np.ones(shape, np.int64)
    # IEEE specials: any NaN, or zero and inf together -> NaN; else zero -> +-0; inf -> +-inf.
    acc = np.cumsum if cumulative else (lambda a, axis: np.sum(a, axis=axis))
    nan = acc(np.isnan(xw), axis=-1) > 0
    zero = acc(xw == 0, axis=-1) > 0
    inf = acc(np.isinf(xw), axis=-1) > 0
    neg = acc(np.signbit(xw), axis=-1) % 2 == 1
    special = nan | zero | inf
    g = 2.0 * (ks + 4) * UNIT[wide]
    lim = 1100 if wide == F64 else 20000
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        mm = np.where(special, 0.5, ms)
        lo = np.ldexp(np.nextafter(mm - np.abs(mm) * g, -np.inf), np.clip(es, -lim, lim))
        hi = np.ldexp(np.nextafter(mm + np.abs(mm) * g, np.inf), np.clip(es, -lim, lim))
        r_lo, r_hi = round_float(lo.astype(wide), out_dtype), round_float(hi.astype(wide), out_dtype)
        spec_val = np.where(nan | (zero & inf), np.nan, np.where(zero, 0.0, np.inf))
        spec_val = np.where(neg, -spec_val, spec_val).astype(F64)
    u = dtypes.storage_uint(out_dtype)
    certain = (r_lo.view(u) == r_hi.view(u)) | special
    out = np.array(np.where(special, round_float(spec_val, out_dtype), r_lo), out_dtype)
    flat = x.reshape(-1, n)
    for i in np.flatnonzero(~certain):
        if cumulative:
            row, k = divmod(i, n)
            terms = flat[row, :k + 1]
        else:
            terms = flat[i]
        out.flat[i] = round_exact(*_exact_product(terms.astype(F64)), out_dtype)
    return out


def _complex_products(x: np.ndarray, out_dtype, cumulative: bool) -> np.ndarray:
    """Complex (prefix) products, real and imaginary parts each correctly rounded.

    Wide evaluation: left to right in complex128 (complex64 inputs) / clongdouble; each naive
    complex multiply has normwise relative error <= sqrt(5) u (Brent, Percival, Zimmermann, "Error
    bounds on complex floating-point multiplication", Math. Comp. 76, 2007), so after k factors
    |p - exact| <= ((1 + 3u)^k - 1) |p| (1 + ...) bounds each part. Where part +- bound round to one
    value it is the answer; the rest (and any prefix leaving the wide type's normal range) is the
    exact Gaussian-integer product rounded once. Prefixes holding inf/NaN or a zero factor keep
    the wide left-to-right value (IEEE signs of zeros / inf-NaN propagation, not certified: XLA
    leaves the multiplication order unspecified)."""
    part = F32 if out_dtype == np.complex64 else F64
    wide = np.dtype(np.complex128) if out_dtype == np.complex64 else np.dtype(np.clongdouble)
    wreal = wide.type(0).real.dtype
    u = float(np.finfo(wreal).eps) / 2
    n = x.shape[-1]
    shape = x.shape if cumulative else x.shape[:-1]
    if n == 0:
        return np.ones(shape, out_dtype)
    xw = x.astype(wide)
    with np.errstate(all="ignore"):
        p = np.cumprod(xw, axis=-1)
        mag = np.abs(p)
        fi = np.finfo(wreal)
        ok = np.isfinite(mag) & (mag < fi.max / 4) & (mag > fi.tiny * 2.0 ** 64)
        ok = np.logical_and.accumulate(ok, axis=-1)    # every partial product in range so far
        nonfinite = np.logical_or.accumulate(~np.isfinite(xw), axis=-1)
        zero = np.logical_or.accumulate(xw == 0, axis=-1)
        k = np.arange(1, n + 1, dtype=np.float64)
        rel = wreal.type(3 * u) * k.astype(wreal) * wreal.type(1.01) + wreal.type(2 * u)
        bound = mag * rel
        if not cumulative:
            p, bound, ok, nonfinite, zero = p[..., -1], bound[..., -1], ok[..., -1], nonfinite[..., -1], zero[..., -1]
        out = np.empty(shape, out_dtype)
        certain = np.ones(shape, bool)
        for comp, attr in ((p.real, "real"), (p.imag, "imag")):
            lo, hi = round_float(comp - bound, part), round_float(comp + bound, part)
            uint = dtypes.storage_uint(part)
            certain &= lo.view(uint) == hi.view(uint)
            setattr(out, attr, round_float(comp, part))
    keep_wide = nonfinite | zero
    todo = np.flatnonzero((~certain | ~ok) & ~keep_wide)
    flat = x.reshape(-1, n)
    for i in todo:
        if cumulative:
            row, kk = divmod(int(i), n)
            terms = flat[row, :kk + 1]
        else:
            terms = flat[int(i)]
        re_n, im_n, e = _exact_complex_product(terms)
        out.flat[i] = complex(0)
        out.real.flat[i] = round_exact(re_n, e, part)
        out.imag.flat[i] = round_exact(im_n, e, part)
    return out


def _exact_complex_product(terms: np.ndarray) -> tuple[int, int, int]:
    """(re, im, e): the exact product of finite complex values is (re + i im) * 2**e."""
    re_n, im_n, e = 1, 0, 0
    ms_r, es_r = mant_exp(terms.real.astype(F64))
    ms_i, es_i = mant_exp(terms.imag.astype(F64))
    for a, ea, b, eb in zip(ms_r, es_r, ms_i, es_i):
        lo = min(ea if a else eb, eb if b else ea)
        a, b = a << (ea - lo) if a else 0, b << (eb - lo) if b else 0
        re_n, im_n = re_n * a - im_n * b, re_n * b + im_n * a
        e += lo
    return re_n, im_n, e


def products_last(eqn, x: np.ndarray, cumulative: bool) -> np.ndarray:
    dtype = x.dtype
    if dtypes.is_int(dtype):
        w = x.astype(_int_wide(dtype))
        return wrap_int(np.cumprod(w, axis=-1) if cumulative else np.prod(w, axis=-1), dtype)
    if dtypes.is_float(dtype):
        return float_products(x, dtype, cumulative)
    if dtypes.is_complex(dtype):
        return _complex_products(x, dtype, cumulative)
    raise eqn.unsupported(f"product of {dtype}")


@register("reduce_prod")
def reduce_prod(eqn, x, *, axes):
    return np.asarray(products_last(eqn, move_last(np.asarray(x), axes), cumulative=False))


# ----- argmax / argmin

def _arg_extremum(np_fn):
    def rule(eqn, x, *, axes, index_dtype):
        x = np.asarray(x)
        if dtypes.is_complex(x.dtype):
            raise eqn.unsupported("argmax/argmin of complex values")
        (axis,) = axes
        if dtypes.is_float(x.dtype):
            x = widen_narrow_float(x)      # NumPy: the first NaN wins, ties go to the lowest index
        elif x.dtype in dtypes.ML_INTS or x.dtype in dtypes.ML_UINTS:
            x = x.astype(np.int8)
        return np.asarray(np_fn(x, axis=axis)).astype(index_dtype)
    return rule


register("argmax")(_arg_extremum(np.argmax))
register("argmin")(_arg_extremum(np.argmin))


# --------------------------------------------------------------------------------------------
# Generic reduce with a computation jaxpr, evaluated on whole slices at once.

_BATCHED: dict = {}


def _batched(jaxpr, consts, arg_dtypes: tuple, length: int):
    """The computation jaxpr vmapped over vectors of ``length`` elements (traced once per
    computation, length and dtypes): every primitive in it then has its real array shape, so
    other families' rules see ordinary equations."""
    key = (id(jaxpr), length, arg_dtypes)
    hit = _BATCHED.get(key)
    if hit is None or hit[0] is not jaxpr:
        closed = jaxpr if isinstance(jaxpr, jcore.ClosedJaxpr) or not hasattr(jcore, "ClosedJaxpr") \
            else jcore.ClosedJaxpr(jaxpr, list(consts))
        fun = jax.vmap(jcore.jaxpr_as_fun(closed))
        traced = jax.make_jaxpr(fun)(*[jax.ShapeDtypeStruct((length,), d) for d in arg_dtypes])
        if len(_BATCHED) > 512:     # bounded: entries hold their jaxpr alive
            _BATCHED.clear()
        hit = _BATCHED[key] = (jaxpr, traced)
    return hit[1]


def _apply(eqn, jaxpr, consts, args: list) -> list:
    """The scalar computation applied elementwise to equally shaped arrays."""
    shape = args[0].shape
    flat = [np.ascontiguousarray(a).reshape(-1) for a in args]
    n = flat[0].size
    if n == 0:
        return [np.zeros(shape, a.dtype) for a in args[:len(args) // 2]]
    batched = _batched(jaxpr, consts, tuple(a.dtype for a in flat), n)
    return [np.asarray(o).reshape(shape) for o in eqn.eval_jaxpr(batched, *flat)]


def tree_reduce_last(eqn, jaxpr, consts, xs: list, inits: list) -> list:
    """Reduce the last axis of each array in ``xs`` with the computation ``jaxpr``
    (``(acc..., x...) -> acc...``): pairwise halving, then combined with the init values."""
    n = xs[0].shape[-1]
    while n > 1:
        h = n // 2
        left = [x[..., :h] for x in xs]
        right = [x[..., h:2 * h] for x in xs]
        combined = _apply(eqn, jaxpr, consts, left + right)
        xs = [np.concatenate([c.astype(x.dtype), x[..., 2 * h:]], axis=-1) for c, x in zip(combined, xs)]
        n = xs[0].shape[-1]
    shape = xs[0].shape[:-1]
    acc = [np.broadcast_to(np.asarray(i, x.dtype), shape) for i, x in zip(inits, xs)]
    if n == 1:
        acc = _apply(eqn, jaxpr, consts, acc + [x[..., 0] for x in xs])
    return [np.array(np.broadcast_to(a, shape), dtype=x.dtype) for a, x in zip(acc, xs)]


@register("reduce")
def reduce(eqn, *args, computation, jaxpr, dimensions):
    # computation is the jaxpr as a Python callable (what JAX's impl calls): the jaxpr is evaluated
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    xs = [move_last(np.asarray(x), dimensions) for x in operands]
    return tree_reduce_last(eqn, jaxpr, (), xs, inits)


@register("reduce_window_sum")
def reduce_window_sum(eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation):
    x = np.asarray(x)
    w = windows(x, 0, window_dimensions, window_strides, padding, base_dilation, window_dilation)
    return np.asarray(sum_last(eqn, w, eqn.out_dtype))


@register("reduce_window_max")
def reduce_window_max(eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation):
    w = windows(np.asarray(x), _lowest(x.dtype), window_dimensions, window_strides, padding,
                base_dilation, window_dilation)
    return np.asarray(extremum(eqn, w, "max", lambda k: np.max(k, axis=-1)))


@register("reduce_window_min")
def reduce_window_min(eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation):
    w = windows(np.asarray(x), _highest(x.dtype), window_dimensions, window_strides, padding,
                base_dilation, window_dilation)
    return np.asarray(extremum(eqn, w, "min", lambda k: np.min(k, axis=-1)))


@register("reduce_window")
def reduce_window(eqn, *args, jaxpr, consts, window_dimensions, window_strides, padding,
                  base_dilation, window_dilation):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    window = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
    ws = [windows(np.asarray(x), np.asarray(i), *window) for x, i in zip(operands, inits)]
    return tree_reduce_last(eqn, jaxpr, consts, ws, inits)


_SELECT = {"ge": np.greater_equal, "gt": np.greater, "le": np.less_equal, "lt": np.less}


def _select_fn(eqn, select_prim):
    select = _SELECT.get(getattr(select_prim, "name", str(select_prim)))
    if select is None:
        raise eqn.unsupported(f"select_prim {select_prim}")
    return select


def _select_positions(x: np.ndarray, select, idx: np.ndarray, init=None):
    """For each window (rows of ``idx``), the window element XLA's select picks: scanning the
    window in order, the selected element is replaced by a candidate ``e`` unless
    ``select(selected, e)``. With ``init`` None padding is skipped (SelectAndScatter); otherwise
    padding holds ``init`` and the scan starts from it (select_and_gather_add's reduce_window).
    ``x`` is the flat operand. Returns the chosen flat index per window (-1: padding/none)."""
    shape = idx.shape[:-1]
    if init is None:
        sel_val = np.zeros(shape, x.dtype)
        have = np.zeros(shape, bool)
    else:
        sel_val = np.full(shape, init, x.dtype)
        have = np.ones(shape, bool)
    sel_idx = np.full(shape, -1, np.int64)
    with np.errstate(invalid="ignore"):
        for j in range(idx.shape[-1]):
            cand = idx[..., j]
            valid = cand >= 0
            if init is None:
                val = np.where(valid, x[np.where(valid, cand, 0)] if x.size else 0, 0).astype(x.dtype)
                take = valid & (~have | ~select(sel_val, val))
            else:
                val = np.where(valid, x[np.where(valid, cand, 0)] if x.size else init, init).astype(x.dtype)
                take = ~select(sel_val, val)
            sel_val = np.where(take, val, sel_val)
            sel_idx = np.where(take, cand, sel_idx)
            have = have | take
    return sel_idx


def scatter_sum(eqn, target_size: int, idx: np.ndarray, values: np.ndarray, out_dtype) -> np.ndarray:
    """``out[idx[i]] += values[i]`` into zeros, each output the correctly rounded / wrapped sum
    of its contributions (idx < 0 dropped)."""
    idx, values = idx.ravel(), values.ravel()
    keep = idx >= 0
    idx, values = idx[keep], values[keep]
    order = np.argsort(idx, kind="stable")
    idx, values = idx[order], values[order]
    counts = np.bincount(idx, minlength=target_size)
    width = int(counts.max()) if counts.size else 0
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(idx.size) - starts[idx]
    dense = np.zeros((target_size, max(width, 1)), values.dtype)
    dense[idx, rank] = values
    return sum_last(eqn, dense, out_dtype)


def _check_source_shape(eqn, source_shape, idx) -> None:
    """SelectAndScatter needs one source value per window (XLA's shape inference rejects anything
    else; JAX's shape rule does not check it)."""
    if tuple(source_shape) != idx.shape[:-1]:
        raise TypeError(f"{eqn.name}: source shape {tuple(source_shape)} must equal the shape of "
                        f"the window grid {idx.shape[:-1]} (XLA SelectAndScatter)")


@register("select_and_scatter_add")
def select_and_scatter_add(eqn, source, operand, *, select_prim, window_dimensions, window_strides,
                           padding):
    operand = np.asarray(operand)
    idx = window_indices(operand.shape, window_dimensions, window_strides, padding)
    _check_source_shape(eqn, np.shape(source), idx)
    chosen = _select_positions(widen_narrow_float(operand).ravel(), _select_fn(eqn, select_prim), idx)
    out = scatter_sum(eqn, operand.size, chosen, np.asarray(source), eqn.out_dtype)
    return out.reshape(operand.shape)


@register("select_and_scatter")
def select_and_scatter(eqn, operand, source, init_value, *, select_jaxpr, select_consts, scatter_jaxpr,
                       scatter_consts, window_dimensions, window_strides, padding):
    """Generic SelectAndScatter: selection as in select_and_scatter_add with the select
    computation; each output starts at init_value and the scatter computation folds in the
    source values selecting it, in row-major window order (XLA leaves that order unspecified:
    defined for associative, commutative scatter computations)."""
    operand, source = np.asarray(operand), np.asarray(source)
    idx = window_indices(operand.shape, window_dimensions, window_strides, padding)
    _check_source_shape(eqn, source.shape, idx)
    select = lambda a, b: _apply(eqn, select_jaxpr, select_consts, [a, b])[0].astype(bool)  # noqa: E731
    chosen = _select_positions(operand.ravel(), select, idx).ravel()
    out = np.full(operand.size, np.asarray(init_value), operand.dtype)
    src = source.ravel()
    keep = np.flatnonzero(chosen >= 0)
    targets = chosen[keep]
    # Rounds: the r-th contribution of every target at once (targets distinct within a round).
    order = np.argsort(targets, kind="stable")
    targets, vals = targets[order], src[keep][order]
    starts = np.searchsorted(targets, targets, side="left")
    rank = np.arange(targets.size) - starts
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        sel = rank == r
        t = targets[sel]
        out[t] = _apply(eqn, scatter_jaxpr, scatter_consts, [out[t], vals[sel]])[0]
    return out.reshape(operand.shape)


@register("select_and_gather_add")
def select_and_gather_add(eqn, tangents, operand, *, select_prim, window_dimensions, window_strides,
                          padding, base_dilation, window_dilation):
    operand, tangents = np.asarray(operand), np.asarray(tangents)
    idx = window_indices(operand.shape, window_dimensions, window_strides, padding, base_dilation,
                         window_dilation)
    init = -np.inf if getattr(select_prim, "name", "") in ("ge", "gt") else np.inf
    chosen = _select_positions(widen_narrow_float(operand).ravel(), _select_fn(eqn, select_prim), idx, init=init)
    t = np.ravel(tangents)
    vals = t[np.where(chosen >= 0, chosen, 0)] if t.size else np.zeros(chosen.shape, t.dtype)
    return np.where(chosen >= 0, vals, np.zeros((), t.dtype)).astype(tangents.dtype)


# --------------------------------------------------------------------------------------------
# Cumulative reductions along one axis.

def _cumulative(fn):
    def rule(eqn, x, *, axis, reverse):
        x = np.moveaxis(np.asarray(x), axis, -1)
        if reverse:
            x = x[..., ::-1]
        out = fn(eqn, np.ascontiguousarray(x))
        if reverse:
            out = out[..., ::-1]
        return np.ascontiguousarray(np.moveaxis(np.asarray(out), -1, axis))
    return rule


def _cumsum(eqn, x):
    dtype = x.dtype
    if dtypes.is_int(dtype):
        return wrap_int(np.cumsum(x.astype(_int_wide(dtype)), axis=-1), dtype)
    if dtypes.is_complex(dtype):
        out = np.empty(x.shape, dtype)
        part = F32 if dtype == np.complex64 else F64
        out.real = _float_cumsum(np.ascontiguousarray(x.real), part)
        out.imag = _float_cumsum(np.ascontiguousarray(x.imag), part)
        return out
    if dtypes.is_float(dtype):
        return _float_cumsum(x, dtype)
    raise eqn.unsupported(f"cumsum of {dtype}")


def _float_cumsum(x, out_dtype):
    wide = wide_type(x.dtype)
    xw = x.astype(wide)
    n = x.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.cumsum(xw, axis=-1)
        a = np.cumsum(np.abs(xw), axis=-1)
    if n == 0:
        return np.zeros(x.shape, out_dtype)
    flat = x.reshape(-1, n).astype(F64)

    def exact(i):
        row, k = divmod(i, n)
        return (flat[row, :k + 1],)

    def refine(idx):
        row, k = np.divmod(idx, n)
        prefix = np.where(np.arange(n)[None, :] <= k[:, None], flat[row], 0.0)   # exact zeros beyond
        return refine_sums(prefix, None, wide)
    # XLA's cumsum is a reduce_window over n elements (zero padded): one term only when n == 1.
    return certified_round(s, sum_error_bound(a, np.arange(1, n + 1), wide), out_dtype, exact, refine,
                           single=n == 1)


register("cumsum")(_cumulative(_cumsum))
register("cumprod")(
    _cumulative(lambda eqn, x: products_last(eqn, x, cumulative=True)))
register("cummax")(_cumulative(lambda eqn, x: extremum(eqn, x, "max", lambda k: np.maximum.accumulate(k, axis=-1))))
register("cummin")(_cumulative(lambda eqn, x: extremum(eqn, x, "min", lambda k: np.minimum.accumulate(k, axis=-1))))


def _cumlogsumexp(eqn, x):
    """Every prefix log(sum(exp(x_i))) correctly rounded (spec/lax_reductions.py cumlogsumexp).

    Wide evaluation (float64; long double for float64 inputs) with the running maximum m and
    s_k = sum_{i<=k} exp(x_i - m_k) - 1 >= 0 (the maximum's own term, exactly 1, left out):
    s_k = s_{k-1} + exp(x_k - m_k) while the maximum stays, (s_{k-1} + 1) exp(m_{k-1} - m_k) when
    x_k is a new maximum; r_k = m_k + log1p(s_k). A bound on |r_k - exact| is carried along (each
    exp/log1p/+ with a few units of its rounding error, exp's argument rounded once); where
    r_k +- bound round to one value that is the answer (rounding is monotone), the rest is
    recomputed in mpmath with Ziv's test.

    The bound holds for every exp and log1p NumPy may dispatch to (they differ by host): it allows
    exp 4 units (2 ulp) and log1p 1 ulp, doubled; the float64 loops are SVML's ``_ha`` (<= 1 ulp) on
    AVX512_SKX hosts, glibc's elsewhere (<= 1 ulp), and long double has no SIMD loop (lax_special.Fn).
    """
    if not dtypes.is_float(x.dtype):
        raise eqn.unsupported(f"cumlogsumexp of {x.dtype}")
    wide = wide_type(x.dtype, x.dtype)
    u = UNIT[wide]
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape, x.dtype)
    xw = x.astype(wide)
    tiny = np.finfo(wide).tiny * 4       # > every exp result flushed to zero (abs error)
    with np.errstate(all="ignore"):
        # Specials (an infinite or NaN running maximum): logaddexp gives them exactly.
        special_vals = np.logaddexp.accumulate(xw, axis=-1)
        m = np.maximum.accumulate(xw, axis=-1)
        fin = np.isfinite(m)
        mf = np.where(fin, m, 0)
        xf = np.where(np.isfinite(xw), xw, -np.inf)
        s = np.full(x.shape[:-1], -1.0, wide)          # before any term: sum 0, minus 1
        err = np.zeros(x.shape[:-1], wide)             # relative error bound of s
        prev = np.full(x.shape[:-1], -np.inf, wide)
        r = np.empty(x.shape, wide)
        bound = np.empty(x.shape, wide)
        for k in range(n):
            mk = mf[..., k]
            new_max = xf[..., k] > prev                # its term is exp(0) = 1, exactly
            d = np.where(new_max, 0, xf[..., k] - mk)  # <= 0, rounded once
            dm = np.where(new_max & np.isfinite(prev), prev - mk, 0)   # <= 0
            t = np.exp(d)
            grown = s + 1                              # s_{k-1} + 1, exact before the first term
            scaled = grown * np.exp(dm)
            e_t = u * (4 + 2 * np.abs(np.where(np.isfinite(d), d, 0)))
            e_scaled = (err * np.maximum(s, 0) / np.where(grown > 0, grown, 1) + u) + u * (4 + 2 * np.abs(dm)) + u
            s_new = np.where(new_max, scaled, s + t)
            err_new = np.where(new_max, e_scaled,
                               (err * s + e_t * t) / np.where(s_new > 0, s_new, 1) + u)
            s = np.where(np.isfinite(prev) | ~new_max, s_new, 0.0)   # the first term: s = 0 exactly
            err = np.where(np.isfinite(prev) | ~new_max, err_new, 0.0)
            L = np.log1p(s)
            r[..., k] = mk + L
            # |log1p error| <= rel(s) * L (log1p(y) >= y / (1 + y)); log1p and the final add round.
            bound[..., k] = 2 * (1.01 * err * L + 2 * u * L + 2 * u * np.abs(mk + L) + (k + 1) * tiny)
            prev = np.maximum(prev, xf[..., k])
        # One finite term (the rest -inf): s = 1, log(s) = 0, the result is that term exactly (the
        # only exact case: otherwise log(s) is transcendental, Lindemann-Weierstrass).
        one = np.cumsum(np.isfinite(xw), axis=-1) == 1
        # (-0.0 gives +0.0: log(exp(-0)) = log(1) = +0, as JAX's logaddexp from the -inf init)
        r = np.where(fin, np.where(one, mf + 0, r), special_vals)
        bound = np.where(fin & ~one, bound, 0)
    out, certain = _certify(r, bound, x.dtype)
    flat, rows = out.reshape(-1), x.reshape(-1, n).astype(F64)
    for i in np.flatnonzero(~certain):
        row, k = divmod(int(i), n)
        flat[i] = _mp_logsumexp(rows[row, :k + 1], x.dtype)
    return flat.reshape(x.shape)


def _certify(r, bound, dtype):
    """(round(r), flat mask of the elements where r - bound and r + bound round alike)."""
    with np.errstate(all="ignore"):
        lo, hi = round_float(r - bound, dtype), round_float(r + bound, dtype)
    uint = dtypes.storage_uint(dtype)
    certain = ((lo.view(uint) == hi.view(uint)) | ~np.isfinite(r) | (bound == 0)).reshape(-1)
    return np.array(round_float(r, dtype), dtype), certain


def _mp_logsumexp(v: np.ndarray, dtype):
    """log(sum(exp(v))) of finite-or--inf float64 values, correctly rounded: mpmath enclosures
    under Ziv's test (numerics.ziv), 128 to 4096 bits (loud past that: Uncertified)."""
    import mpmath
    v = [float(a) for a in v if a != -np.inf]

    def enclose(prec):
        with mpmath.workprec(prec):
            m = max(v)
            rest = list(v)
            rest.remove(m)                 # the maximum's term is exactly 1: log1p of the others
            # exact differences, then exp/sum/log1p each within a few units of 2**-prec (relative)
            s = mpmath.fsum(mpmath.exp(mpmath.fsub(a, m, exact=True)) for a in rest)
            L = mpmath.log1p(s)
            return mpmath.mpf(m) + L, (abs(m) + abs(L)) * mpmath.mpf(2) ** (-prec + 8 + len(v).bit_length())
    return ziv(enclose, dtype, "cumlogsumexp", precs=(128, 256, 512, 1024, 2048, 4096))


register("cumlogsumexp")(_cumulative(_cumlogsumexp))
