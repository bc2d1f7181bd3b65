"""The reference's numerics: rounding to a dtype and exact arithmetic, in one place.

The bottom floor of ``interp/``: it imports NumPy, ml_dtypes, mpmath, :mod:`interp.dtypes` and
:mod:`interp.errors` only, and every rule module takes its numerics from here (never from another
rule module). StableHLO keeps its element arithmetic in one file (reference/Element.cpp) for the
same reason: an operation's rule then only says which exact value it rounds.

- Correct rounding from a wide float (float64 / long double) to any float dtype:
  :func:`round_float`, through round-to-odd where NumPy or ml_dtypes would round twice.
- Exact values rounded once: :func:`round_exact` (``n * 2**e``).
- Certified rounding of exact sums and products: :func:`certified_round` with
  :func:`sum_error_bound`, :func:`refine_sums`, :func:`exact_dot`, :func:`fsum_round` and
  :func:`float_sum_last` (a correctly rounded sum over the last axis).
- Integer wrap-around: :func:`wrap_int`.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import dtypes as D

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


def mant_exp(x: np.ndarray) -> tuple[list, list]:
    """Finite float64 values as exact (integer mantissa, exponent) pairs."""
    f, e = np.frexp(np.asarray(x, F64))
    return (np.ldexp(f, 53).astype(np.int64).tolist(), (e.astype(np.int64) - 53).tolist())


def exact_dot(a: np.ndarray, b: np.ndarray | None = None) -> tuple[int, int]:
    """Exact ``sum(a * b)`` (or ``sum(a)``) of finite float64 vectors as ``(n, e)``: n * 2**e."""
    ma, ea = mant_exp(a)
    if b is None:
        terms = list(zip(ma, ea))
    else:
        mb, eb = mant_exp(b)
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

