"""Rules: reductions (reduce_*, generic reduce, argmax/argmin), windowed reductions
(reduce_window*, select_and_scatter_add, select_and_gather_add) and cumulative reductions (cum*).

Float sums are *correctly rounded*: the result of every output element is the exact sum of its
terms rounded once to the output dtype (see :func:`certified_round`, which the contraction family
shares). Products (reduce_prod/cumprod) are correctly rounded the same way. Integer results wrap
around in the output type. max/min propagate NaN and order -0.0 below +0.0 (XLA's max/min).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.extend.core as jcore
import numpy as np

from .. import dtypes as D
from ..registry import register

LONGDOUBLE = np.dtype(np.longdouble)
F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
# Unit roundoff of the wide accumulation types.
UNIT = {F64: 2.0 ** -53, LONGDOUBLE: float(np.finfo(np.longdouble).eps) / 2}


# --------------------------------------------------------------------------------------------
# Correct rounding from a wide float (float64 / long double) to any float dtype.

def _round_to_odd(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Round ``x`` to ``target`` (float32/float64) with round-to-odd.

    Rounding to odd into a format with at least p+2 bits followed by round-to-nearest-even into a
    p-bit format equals direct round-to-nearest-even (no double-rounding error)."""
    t = x.astype(target)
    with np.errstate(invalid="ignore", over="ignore"):
        back = t.astype(x.dtype)
        inexact = (back != x) & ~np.isnan(x)
        even = (np.asarray(t).view(D.storage_uint(target)) & 1) == 0
        fix = inexact & even
        if np.any(fix):
            toward = np.where(x > back, np.inf, -np.inf).astype(target)
            t = np.where(fix, np.nextafter(t, toward), t)
    return t


def round_float(x: np.ndarray, dtype) -> np.ndarray:
    """``x`` (float64 or long double) correctly rounded (nearest-even) to the float ``dtype``.

    NumPy's float64->float32/float16 and long double->float64/float32 casts round once; ml_dtypes'
    casts from float64 go through float32 (double rounding), so those go through round-to-odd."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if x.dtype == dtype:
        return x
    if dtype in (F64, F32) or (dtype == np.float16 and x.dtype == F64):
        return x.astype(dtype)
    if x.dtype == LONGDOUBLE:
        x = _round_to_odd(x, F64)
    if dtype == np.float16:
        return x.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_to_odd(x, F32).astype(dtype)


def round_exact(n: int, e: int, dtype) -> np.ndarray:
    """The exact value ``n * 2**e`` (Python ints) rounded to nearest-even in float ``dtype``.
    An exact zero is +0 (every sum starts from XLA's +0 init value)."""
    dtype = np.dtype(dtype)
    if n == 0:
        return np.zeros((), dtype)
    fi = D.finfo(dtype)
    p, emin = int(fi.nmant) + 1, int(fi.minexp)
    m = abs(n)
    q = max(e + m.bit_length() - 1, emin) - (p - 1)   # exponent of the last kept bit
    shift = q - e
    if shift > 0:
        r = m >> shift
        rem = m - (r << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and r & 1):
            r += 1
        m, e = r, q
    try:
        v = math.ldexp(float(m), e)   # m has at most p <= 53 bits: exact unless it overflows float64
    except OverflowError:
        v = math.inf
    v = -v if n < 0 else v
    with np.errstate(over="ignore"):
        # v is representable in dtype unless it overflows; the cast then gives the dtype's
        # overflow value (inf, or NaN for the finite-only float8 types), as convert does.
        return round_float(np.array(v, F64), dtype)


def _mant_exp(x: np.ndarray) -> tuple[list, list]:
    """Finite float64 values as exact (integer mantissa, exponent) pairs."""
    f, e = np.frexp(np.asarray(x, F64))
    return (np.ldexp(f, 53).astype(np.int64).tolist(), (e.astype(np.int64) - 53).tolist())


def exact_dot(a: np.ndarray, b: np.ndarray | None = None) -> tuple[int, int]:
    """Exact ``sum(a * b)`` (or ``sum(a)``) of finite float64 vectors as ``(n, e)``: n * 2**e."""
    ma, ea = _mant_exp(a)
    if b is None:
        terms = list(zip(ma, ea))
    else:
        mb, eb = _mant_exp(b)
        terms = [(x * y, i + j) for x, i, y, j in zip(ma, ea, mb, eb) if x and y]
    terms = [(m, e) for m, e in terms if m]
    if not terms:
        return 0, 0
    e0 = min(e for _, e in terms)
    return sum(m << (e - e0) for m, e in terms), e0


def fsum_round(terms: np.ndarray, dtype) -> np.ndarray:
    """The exact sums of the rows of ``terms`` (finite float64 values, exact terms) rounded once
    to float ``dtype`` (at most float64), for a few rows: math.fsum gives
    hi = RN64(sum) (correctly rounded: Shewchuk's algorithm as CPython implements it), and fsum of
    the terms and -hi the sign of the exact residual. The exact sum and hi + sign(residual) u/4
    (u = 2**(e - 53) for hi = f 2**e, 1/2 <= |f| < 1: at most the ulp on either side, twice the
    one below a power of two) lie in the open interval between hi and its float64 neighbour on
    that side, which holds no float64 number, hence no rounding boundary of a narrower ``dtype``
    (those are float64 numbers): they round alike. To float64 both round to hi (at most halfway,
    and a tie there goes to the power of two). That value goes to :func:`round_exact`. An exact
    zero is +0."""
    out = np.empty(terms.shape[0], dtype)
    for i, row in enumerate(terms.tolist()):
        hi = math.fsum(row)
        row.append(-hi)
        residual = math.fsum(row)
        f, e = math.frexp(hi)                           # hi = (f 2**53) 2**(e - 53), f 2**53 an integer
        out[i] = round_exact(4 * int(f * 2.0 ** 53) + (residual > 0) - (residual < 0), e - 55, dtype)
    return out


def wide_type(*dtypes) -> np.dtype:
    """float64 when every term (product) of these input dtypes is exact in float64 (mantissa
    bits add up to <= 53), else long double."""
    return _wide_type(tuple(np.dtype(dt) for dt in dtypes))


@functools.lru_cache(maxsize=None)
def _wide_type(dtypes) -> np.dtype:
    bits = 0
    for dt in dtypes:
        if D.is_float(dt):
            bits += int(D.finfo(dt).nmant) + 1
        elif D.is_complex(dt):
            bits += 24 if dt == np.complex64 else 53
        else:
            bits += D.bit_width(dt)
    return F64 if bits <= 53 else LONGDOUBLE


def sum_error_bound(absbound, k, wide) -> np.ndarray:
    """A bound of |computed - exact| for a sum of ``k`` exact terms computed in ``wide`` in any
    order (any tree of k-1 additions, blocked or vectorised, FMA or not: the terms are exact):
    gamma_{k-1} * sum|term| (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
    eq. 4.4), taken as gamma_{k+1} * absbound (``absbound`` >= sum|term|)."""
    wide = np.dtype(wide)
    with np.errstate(over="ignore", invalid="ignore"):
        ku = (np.asarray(k, wide) + 1) * np.asarray(UNIT[wide], wide)
        return np.asarray(absbound, wide) * (ku / (1 - ku))


def certified_round(s: np.ndarray, bound: np.ndarray, out_dtype, exact_fn, refine=None,
                    single=False) -> np.ndarray:
    """Correctly rounded sums from approximate wide sums.

    ``s`` holds approximations (float64 / long double) of exact sums with ``|s - exact| <= bound``
    (see :func:`sum_error_bound`). Where the whole interval ``[s - bound, s + bound]`` rounds to
    one value of ``out_dtype``, that value is the correctly rounded exact sum (rounding is
    monotone). The undecided elements go to ``refine(flat_indices) -> (s, bound)`` (a more precise
    method, long double or double-double) if given, then to ``exact_fn(flat_index) -> (a, b)``,
    the float64 vectors whose exact dot (sum if b is omitted) is computed and rounded. Non-finite ``s`` are exact already (no finite partial
    sum can overflow the wide type): they are rounded as they are.
    An exact zero is +0.0 (XLA accumulates from a +0.0 init value), except where ``single``
    (a sum of exactly one term, which XLA does not accumulate): that term's sign is kept.
    """
    s = np.asarray(s)
    wide = s.dtype
    out_dtype = np.dtype(out_dtype)
    u = UNIT[wide]
    with np.errstate(over="ignore", invalid="ignore"):
        bound = np.asarray(bound, wide)
        # Widen by the rounding of s -/+ bb itself (<= u |s -/+ bb|), so that the computed
        # lo <= s - bound and hi >= s + bound: bb = bound + 4u (|s| + bound).
        bb = np.abs(s)
        bb += bound
        bb *= np.asarray(4 * u, wide)
        bb += bound
        r_lo, r_hi = round_float(s - bb, out_dtype), round_float(s + bb, out_dtype)
    uint = D.storage_uint(out_dtype)
    certain = (r_lo.view(uint) == r_hi.view(uint)) | (bb == 0)   # bb == 0: s is exact (r_lo keeps -0.0)
    out = r_lo
    special = ~np.isfinite(s)
    if special.any():
        certain |= special
        out = np.where(special, round_float(s, out_dtype), out)
    zero = (s == 0) & (bound == 0) & ~np.asarray(single, bool)
    if zero.any():
        out = np.where(zero, np.zeros((), out_dtype), out)  # exact zero: +0
    out = np.asarray(out, out_dtype)
    todo = np.flatnonzero(~certain)
    if todo.size and refine is not None:
        s2, b2 = refine(todo)
        out.flat[todo] = certified_round(s2, b2, out_dtype, lambda j: exact_fn(todo[j]),
                                         single=np.broadcast_to(single, s.shape).flat[todo])
        return out
    for i in todo:
        out.flat[i] = round_exact(*exact_dot(*exact_fn(i)), out_dtype)
    return out


def refine_sums(a: np.ndarray, b: np.ndarray | None, wide) -> tuple[np.ndarray, np.ndarray]:
    """Second tier for undecided elements: ``sum(a * b)`` (rows of (F, K) float64 arrays holding
    the exact input values; ``b`` None for plain sums) recomputed more precisely.

    wide float64 -> long double: the products are exact there too, the bound 2**11 times tighter.
    wide long double (float64 inputs) -> double-double (Ogita, Rump, Oishi, "Accurate sum and dot
    product", SIAM J. Sci. Comput. 26(6), 2005, Sum2/Dot2): each product is split exactly into
    four float64 terms (frexp + Veltkamp split into 26-bit halves), scaled by the row's largest
    exponent, and summed with TwoSum; |s + c - exact| <= gamma_{n-1}^2 sum|term| plus 2**-1073 per
    term (relative to the largest) for the rounding or dropping of tiny terms.
    """
    if wide == F64 and UNIT[LONGDOUBLE] < UNIT[F64]:
        t = a.astype(LONGDOUBLE) if b is None else a.astype(LONGDOUBLE) * b.astype(LONGDOUBLE)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.sum(t, axis=-1), sum_error_bound(np.sum(np.abs(t), axis=-1), t.shape[-1], LONGDOUBLE)
    if b is None:
        b = np.ones_like(a)
    rows = max(1, (1 << 20) // max(1, 4 * a.shape[-1]))      # bounded memory: chunks of rows
    parts = [_double_double_dot(a[i:i + rows], b[i:i + rows]) for i in range(0, a.shape[0], rows)]
    return (np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, LONGDOUBLE),
            np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, LONGDOUBLE))


def _double_double_dot(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fa, ea = np.frexp(a)
    fb, eb = np.frexp(b)
    split = lambda f: (f * 134217729.0 - (f * 134217729.0 - f))  # noqa: E731  (Veltkamp, 2**27 + 1)
    ha, hb = split(fa), split(fb)
    la, lb = fa - ha, fb - hb
    e = (ea + eb).astype(np.int64)
    nonzero = (fa != 0) & (fb != 0)
    lowest = np.iinfo(np.int64).min
    emax = np.max(np.where(nonzero, e, lowest), axis=-1, initial=lowest)
    emax = np.where(emax == lowest, 0, emax)
    shift = e - emax[:, None]
    # Products below 2**-1100 of the row's largest are dropped (counted in the bound below).
    tiny = shift < -1100
    shift = np.maximum(shift, -1100)
    # Terms as rows (one contiguous vector per step of the TwoSum loop).
    terms = np.concatenate([np.where(tiny, 0.0, np.ldexp(x * y, shift)).T
                            for x, y in ((ha, hb), (ha, lb), (la, hb), (la, lb))])
    n = terms.shape[0]
    s = np.zeros(terms.shape[1])
    c = np.zeros(terms.shape[1])
    for t in terms:
        x = s + t
        z = x - s
        c += (s - (x - z)) + (t - z)
        s = x
    g = n * UNIT[F64] / (1 - n * UNIT[F64])
    v = s.astype(LONGDOUBLE) + c.astype(LONGDOUBLE)
    bound = (2 * g * g) * np.sum(np.abs(terms), axis=0).astype(LONGDOUBLE) + n * 2.0 ** -1073 \
        + np.abs(v) * (2 * UNIT[LONGDOUBLE])
    return np.ldexp(v, emax), np.ldexp(bound, emax)


def _move_last(x: np.ndarray, axes) -> np.ndarray:
    """``x`` with ``axes`` moved to the end and flattened into one axis."""
    axes = tuple(a % x.ndim for a in axes) if x.ndim else ()
    keep = [a for a in range(x.ndim) if a not in axes]
    x = np.transpose(x, keep + list(axes))
    # (the reduced size spelled out: -1 is ambiguous when a kept dimension is 0)
    return x.reshape(x.shape[:len(keep)] + (math.prod(x.shape[len(keep):]),))


def float_sum_last(x: np.ndarray, out_dtype) -> np.ndarray:
    """Correctly rounded sum over the last axis of a real float array."""
    k = x.shape[-1]
    if k == 0:
        return np.zeros(x.shape[:-1], out_dtype)
    wide = wide_type(x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        if k == 1:      # one term: itself (NumPy's sum would add it to +0.0, losing a -0.0)
            s = x[..., 0].astype(wide)
            a = np.abs(s)
        elif x.dtype in (F32, np.dtype(np.float16), F64):
            # NumPy accumulates in the wide type (no full-size wide copy). sum|x| <= k max|x|:
            # two fast reductions instead of an |x| temporary (a looser bound only sends a few
            # more elements to the refinement tier).
            s = np.sum(x, axis=-1, dtype=wide)
            a = np.maximum(np.max(x, axis=-1).astype(wide), -np.min(x, axis=-1).astype(wide)) * k
        else:
            xw = x.astype(wide)
            s = np.sum(xw, axis=-1)
            a = np.sum(np.abs(xw), axis=-1)
    rows = x.reshape(-1, k)
    return certified_round(s, sum_error_bound(a, k, wide), out_dtype, lambda i: (rows[i].astype(F64),),
                           lambda idx: refine_sums(rows[idx].astype(F64), None, wide), single=k == 1)


def wrap_int(v: np.ndarray, dtype) -> np.ndarray:
    """Integers (int64/uint64, wrapped mod 2**64) wrapped into the integer ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype in D.ML_INTS or dtype in D.ML_UINTS:
        bits = D.bit_width(dtype)
        v = np.asarray(v).astype(np.int64) & ((1 << bits) - 1)
        if D.is_signed(dtype):
            v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
        return v.astype(dtype)
    return np.asarray(v).astype(dtype)


def _int_wide(dtype):
    return np.int64 if D.is_signed(dtype) else np.uint64


def sum_last(eqn, x: np.ndarray, out_dtype) -> np.ndarray:
    """Sum over the last axis in ``out_dtype``: wrapping for integers, correctly rounded for
    floats (complex: each part)."""
    out_dtype = np.dtype(out_dtype)
    if D.is_int(out_dtype):
        return wrap_int(np.sum(x.astype(_int_wide(x.dtype)), axis=-1), out_dtype)
    if D.is_float(out_dtype):
        return float_sum_last(x, out_dtype)
    if D.is_complex(out_dtype):
        part = F32 if out_dtype == np.complex64 else F64
        out = np.empty(x.shape[:-1], out_dtype)
        out.real = float_sum_last(np.ascontiguousarray(x.real), part)
        out.imag = float_sum_last(np.ascontiguousarray(x.imag), part)
        return out
    raise eqn.unsupported(f"sum of {out_dtype}")


# --------------------------------------------------------------------------------------------
# Ordering keys: max/min reductions compare with -0.0 < +0.0 and propagate NaN.

def _as_compute(x: np.ndarray) -> np.ndarray:
    """Floats narrower than float32 widened exactly to float32 (order and values kept)."""
    if D.is_float(x.dtype) and x.dtype not in (F32, F64):
        return x.astype(F32)
    return x


def float_key(x: np.ndarray, nan_key: str) -> np.ndarray:
    """Signed integer keys ordering float32/float64 values with -0.0 < +0.0; NaN maps to the
    largest key (``nan_key="max"``) or the smallest ("min")."""
    itype = np.int32 if x.dtype == F32 else np.int64
    i = np.ascontiguousarray(x).view(itype)
    key = np.where(i < 0, i ^ np.array(np.iinfo(itype).max, itype), i)
    info = np.iinfo(itype)
    return np.where(np.isnan(x), info.max if nan_key == "max" else info.min, key).astype(itype)


def key_to_float(key: np.ndarray, dtype) -> np.ndarray:
    itype = key.dtype
    i = np.where(key < 0, key ^ np.array(np.iinfo(itype).max, itype), key).astype(itype)
    v = i.view(F32 if itype == np.int32 else F64)
    v = np.where((key == np.iinfo(itype).max) | (key == np.iinfo(itype).min), np.nan, v)
    return np.asarray(v).astype(dtype)


def _extremum(eqn, x: np.ndarray, kind: str, reduce) -> np.ndarray:
    """``reduce(keys)`` where keys order x as max/min need; ``kind`` is "max" or "min"."""
    if D.is_float(x.dtype):
        xc = _as_compute(x)
        return key_to_float(reduce(float_key(xc, nan_key=kind)), x.dtype)
    if D.is_int(x.dtype) or D.is_bool(x.dtype):
        if x.dtype in D.ML_INTS or x.dtype in D.ML_UINTS:
            return reduce(x.astype(np.int8)).astype(x.dtype)
        return reduce(x)
    if D.is_complex(x.dtype):
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
                "order XLA leaves unspecified")
    out = values[picked]
    return out[..., 1:] if out.ndim == x.ndim and out.shape[-1] == n + 1 else out


# --------------------------------------------------------------------------------------------
# reduce_* over axes

def _lowest(dtype):
    if D.is_float(dtype) or D.is_complex(dtype):   # complex: -inf + 0j, JAX's max identity
        return -np.inf
    return False if D.is_bool(dtype) else int(D.iinfo(dtype).min)


def _highest(dtype):
    if D.is_float(dtype) or D.is_complex(dtype):
        return np.inf
    return True if D.is_bool(dtype) else int(D.iinfo(dtype).max)



@register("reduce_sum")
def reduce_sum(eqn, x, *, axes, out_sharding=None):   # (placement only; plgpu.sum calls it without)
    return np.asarray(sum_last(eqn, _move_last(np.asarray(x), axes), eqn.out_dtype))


def _reduce_extremum(kind):
    np_fn, fill = (np.max, _lowest) if kind == "max" else (np.min, _highest)

    def rule(eqn, x, *, axes, out_sharding=None):   # (out_sharding: JAX 0.11 on)
        x = _move_last(np.asarray(x), axes)
        if x.shape[-1] == 0:     # XLA's init value: -inf / the lowest integer for max
            return np.full(x.shape[:-1], fill(x.dtype), x.dtype)
        if x.shape[-1] == 1 and D.is_complex(x.dtype):
            # XLA's simplifier turns a reduction of one element into that element: the init
            # value is not folded in (matters for complex, where it is no identity; measured).
            return x[..., 0].copy()
        return np.asarray(_extremum(eqn, x, kind, lambda k: np_fn(k, axis=-1)))
    return rule


register("reduce_max")(_reduce_extremum("max"))
register("reduce_min")(_reduce_extremum("min"))


def _bitwise_reduce(ufunc, logical, identity):
    def rule(eqn, x, *, axes):
        x = _move_last(np.asarray(x), axes)
        if D.is_bool(x.dtype):
            return np.asarray(logical.reduce(x, axis=-1, initial=bool(identity)))
        if not D.is_int(x.dtype):
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
    ms, es = _mant_exp(v)
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
    u = D.storage_uint(out_dtype)
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
            uint = D.storage_uint(part)
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
    ms_r, es_r = _mant_exp(terms.real.astype(F64))
    ms_i, es_i = _mant_exp(terms.imag.astype(F64))
    for a, ea, b, eb in zip(ms_r, es_r, ms_i, es_i):
        lo = min(ea if a else eb, eb if b else ea)
        a, b = a << (ea - lo) if a else 0, b << (eb - lo) if b else 0
        re_n, im_n = re_n * a - im_n * b, re_n * b + im_n * a
        e += lo
    return re_n, im_n, e


def products_last(eqn, x: np.ndarray, cumulative: bool) -> np.ndarray:
    dtype = x.dtype
    if D.is_int(dtype):
        w = x.astype(_int_wide(dtype))
        return wrap_int(np.cumprod(w, axis=-1) if cumulative else np.prod(w, axis=-1), dtype)
    if D.is_float(dtype):
        return float_products(x, dtype, cumulative)
    if D.is_complex(dtype):
        return _complex_products(x, dtype, cumulative)
    raise eqn.unsupported(f"product of {dtype}")


@register("reduce_prod")
def reduce_prod(eqn, x, *, axes):
    return np.asarray(products_last(eqn, _move_last(np.asarray(x), axes), cumulative=False))


# ----- argmax / argmin

def _arg_extremum(np_fn):
    def rule(eqn, x, *, axes, index_dtype):
        x = np.asarray(x)
        if D.is_complex(x.dtype):
            raise eqn.unsupported("argmax/argmin of complex values")
        (axis,) = axes
        if D.is_float(x.dtype):
            x = _as_compute(x)      # NumPy: the first NaN wins, ties go to the lowest index
        elif x.dtype in D.ML_INTS or x.dtype in D.ML_UINTS:
            x = x.astype(np.int8)
        return np.asarray(np_fn(x, axis=axis)).astype(index_dtype)
    return rule


register("argmax")(_arg_extremum(np.argmax))
register("argmin")(_arg_extremum(np.argmin))


# --------------------------------------------------------------------------------------------
# Generic reduce with a computation jaxpr, evaluated on whole slices at once.

_BATCHED: dict = {}


def _batched(jaxpr, consts, dtypes: tuple, length: int):
    """The computation jaxpr vmapped over vectors of ``length`` elements (traced once per
    computation, length and dtypes): every primitive in it then has its real array shape, so
    other families' rules see ordinary equations."""
    key = (id(jaxpr), length, dtypes)
    hit = _BATCHED.get(key)
    if hit is None or hit[0] is not jaxpr:
        closed = jaxpr if isinstance(jaxpr, jcore.ClosedJaxpr) or not hasattr(jcore, "ClosedJaxpr") \
            else jcore.ClosedJaxpr(jaxpr, list(consts))
        fun = jax.vmap(jcore.jaxpr_as_fun(closed))
        traced = jax.make_jaxpr(fun)(*[jax.ShapeDtypeStruct((length,), d) for d in dtypes])
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
    xs = [_move_last(np.asarray(x), dimensions) for x in operands]
    return tree_reduce_last(eqn, jaxpr, (), xs, inits)


# --------------------------------------------------------------------------------------------
# Windows: one flat operand index per (output position, window element); -1 for padding.

def window_indices(shape, window_dimensions, window_strides, padding,
                   base_dilation=None, window_dilation=None) -> np.ndarray:
    """Flat indices into an array of ``shape`` for every window element, shape
    ``out_shape + (prod(window_dimensions),)``; -1 where the window element lies in the padding
    or in a base-dilation hole (XLA ReduceWindow semantics; negative padding crops)."""
    nd = len(shape)
    base_dilation = base_dilation or (1,) * nd
    window_dilation = window_dilation or (1,) * nd
    per_dim = []
    for n, w, s, (lo, hi), bd, wd in zip(shape, window_dimensions, window_strides, padding,
                                         base_dilation, window_dilation):
        dilated = (n - 1) * bd + 1 if n else 0
        extent = (w - 1) * wd + 1
        out = max(0, (lo + dilated + hi - extent) // s + 1) if lo + dilated + hi >= extent else 0
        c = np.arange(out)[:, None] * s + np.arange(w)[None, :] * wd - lo
        valid = (c >= 0) & (c < dilated) & (c % bd == 0)
        per_dim.append((np.where(valid, c // bd, -1), out, w))
    out_shape = tuple(o for _, o, _ in per_dim)
    wins = tuple(w for _, _, w in per_dim)
    flat = np.zeros(out_shape + wins, np.int64)
    valid = np.ones(out_shape + wins, bool)
    stride = 1
    for d in reversed(range(nd)):
        idx = per_dim[d][0]
        bshape = [1] * (2 * nd)
        bshape[d], bshape[nd + d] = idx.shape
        idx = idx.reshape(bshape)
        flat = flat + np.where(idx >= 0, idx, 0) * stride
        valid = valid & (idx >= 0)
        stride *= shape[d]
    # (the window size spelled out: -1 cannot be inferred when the output is empty)
    return np.where(valid, flat, -1).reshape(out_shape + (int(np.prod(wins, dtype=np.int64)),))


def windows(x: np.ndarray, pad_value, *window) -> np.ndarray:
    """The windows of ``x`` (``window``: window_indices' arguments after the shape), padding and
    base-dilation holes holding ``pad_value``."""
    idx = window_indices(x.shape, *window)
    vals = np.ravel(x)[np.where(idx >= 0, idx, 0)] if x.size else np.zeros(idx.shape, x.dtype)
    return np.where(idx >= 0, vals, np.asarray(pad_value, x.dtype)).astype(x.dtype)


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
    return np.asarray(_extremum(eqn, w, "max", lambda k: np.max(k, axis=-1)))


@register("reduce_window_min")
def reduce_window_min(eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation):
    w = windows(np.asarray(x), _highest(x.dtype), window_dimensions, window_strides, padding,
                base_dilation, window_dilation)
    return np.asarray(_extremum(eqn, w, "min", lambda k: np.min(k, axis=-1)))


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
    chosen = _select_positions(_as_compute(operand).ravel(), _select_fn(eqn, select_prim), idx)
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
    chosen = _select_positions(_as_compute(operand).ravel(), _select_fn(eqn, select_prim), idx, init=init)
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
    if D.is_int(dtype):
        return wrap_int(np.cumsum(x.astype(_int_wide(dtype)), axis=-1), dtype)
    if D.is_complex(dtype):
        out = np.empty(x.shape, dtype)
        part = F32 if dtype == np.complex64 else F64
        out.real = _float_cumsum(np.ascontiguousarray(x.real), part)
        out.imag = _float_cumsum(np.ascontiguousarray(x.imag), part)
        return out
    if D.is_float(dtype):
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
register("cummax")(_cumulative(lambda eqn, x: _extremum(eqn, x, "max", lambda k: np.maximum.accumulate(k, axis=-1))))
register("cummin")(_cumulative(lambda eqn, x: _extremum(eqn, x, "min", lambda k: np.minimum.accumulate(k, axis=-1))))


def _cumlogsumexp(eqn, x):
    """Every prefix log(sum(exp(x_i))) correctly rounded (spec/lax_reductions.py cumlogsumexp).

    Wide evaluation (float64; long double for float64 inputs) with the running maximum m and
    s_k = sum_{i<=k} exp(x_i - m_k) - 1 >= 0 (the maximum's own term, exactly 1, left out):
    s_k = s_{k-1} + exp(x_k - m_k) while the maximum stays, (s_{k-1} + 1) exp(m_{k-1} - m_k) when
    x_k is a new maximum; r_k = m_k + log1p(s_k). A bound on |r_k - exact| is carried along (each
    exp/log1p/+ with a few units of its rounding error, exp's argument rounded once); where
    r_k +- bound round to one value that is the answer (rounding is monotone), the rest is
    recomputed in mpmath with Ziv's test.
    """
    if not D.is_float(x.dtype):
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
    uint = D.storage_uint(dtype)
    certain = ((lo.view(uint) == hi.view(uint)) | ~np.isfinite(r) | (bound == 0)).reshape(-1)
    return np.array(round_float(r, dtype), dtype), certain


def _mp_logsumexp(v: np.ndarray, dtype):
    """log(sum(exp(v))) of finite-or--inf float64 values, correctly rounded: mpmath enclosures
    under lax_special's Ziv test, 128 to 4096 bits (loud past that: Uncertified)."""
    import mpmath
    from .lax_special import _ziv
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
    return _ziv(enclose, dtype, "cumlogsumexp", precs=(128, 256, 512, 1024, 2048, 4096))


register("cumlogsumexp")(_cumulative(_cumlogsumexp))
