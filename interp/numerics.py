"""The reference's numerics: rounding to a dtype and exact arithmetic, in one place.

The bottom floor of ``interp/``: it imports NumPy, ml_dtypes, mpmath, :mod:`interp.dtypes` and
:mod:`interp.errors` only, and every rule module takes its numerics from here (never from another
rule module). StableHLO keeps its element arithmetic in one file (reference/Element.cpp) for the
same reason: an operation's rule then only says which exact value it rounds. Each function is
defined once (tests/test_numerics.py checks that nothing in interp/ writes one again).

- Rounding to a dtype: :func:`convert` (XLA's ConvertElementType, every dtype),
  :func:`round_float` (its float -> float part, where every correctly rounded rule ends),
  :func:`round_to_odd` (the one round-to-odd, and :func:`odd_sum` for an exact sum of two),
  :func:`reduce_precision_bits` (XLA's ReducePrecision).
- Integers: :func:`wrap_int` (two's complement wrap-around into any integer dtype),
  :func:`sign_extend`, :func:`int_wrapper` (on Python ints).
- Order: :func:`float_key`/:func:`key_to_float` (max/min with -0.0 < +0.0 and NaN).
- Exact values rounded once: :func:`round_exact` (``n * 2**e``), :func:`round_fraction`,
  :func:`mp_round` (mpmath reals), :func:`ziv` (Ziv's test on enclosures; :class:`Uncertified`
  where it cannot decide), :func:`rounding_undecided` (whether an approximation with a known
  relative error decides its rounding).
- Certified rounding of exact sums and products: :func:`certified_round` with
  :func:`sum_error_bound`, :func:`refine_sums`, :func:`exact_dot`, :func:`fsum_round` and
  :func:`float_sum_last` (a correctly rounded sum over the last axis).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np

from . import dtypes

LONGDOUBLE = np.dtype(np.longdouble)
F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
F4 = np.dtype(ml_dtypes.float4_e2m1fn) if hasattr(ml_dtypes, "float4_e2m1fn") else None
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu) if hasattr(ml_dtypes, "float8_e8m0fnu") else None
# Unit roundoff of the wide accumulation types.
UNIT = {F64: 2.0 ** -53, LONGDOUBLE: float(np.finfo(np.longdouble).eps) / 2}


# --------------------------------------------------------------------------------------------
# Rounding to a dtype: XLA's convert, and its float -> float part every correctly rounded rule
# ends in.

def c_order(x) -> np.ndarray:
    """``x`` as a C-contiguous array of the same shape (0-d stays 0-d, unlike np.ascontiguousarray),
    so that ``.view`` of another item type is allowed."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else np.array(x, order="C")


def round_to_odd(x: np.ndarray, target) -> np.ndarray:
    """``x`` (float64 or long double) rounded to the narrower ``target`` (float32 or float64) with
    round-to-odd: ``x`` itself where ``target`` holds it, else whichever of its two neighbours has
    an odd last significand bit; beyond the largest finite value that value (round toward zero
    with a sticky bit, so overflow also rounds to the odd neighbour), infinities and NaN as they are.

    Rounding the result once more, to nearest even, into a format with at most p - 2 significand
    bits (p: target's) and a range inside target's gives the correctly rounded value of ``x``:
    no double-rounding error (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
    proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008). NumPy's own
    float64 -> float16 and ml_dtypes' float64 -> narrow casts go through float32 with two
    roundings; XLA rounds once."""
    target = np.dtype(target)
    with np.errstate(all="ignore"):
        t = x.astype(target)
        back = t.astype(x.dtype)
        inexact = (back != x) & ~np.isnan(x)
        even = (np.asarray(t).view(dtypes.storage_uint(target)) & 1) == 0
        fix = inexact & even
        if np.any(fix):
            toward = np.where(x > back, np.inf, -np.inf).astype(target)
            t = np.where(fix, np.nextafter(t, toward), t)
    return t


def two_sum(a, b):
    """s = fl(a + b) and its exact error e (a + b == s + e), for float64 arrays (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def odd_sum(a, b):
    """a + b rounded to odd in float64 (its last bit sticky when inexact: see
    :func:`round_to_odd`), for float64 arrays ``a`` and ``b``."""
    s, e = two_sum(a, b)
    fix = (e != 0) & np.isfinite(s) & ((c_order(s).view(np.uint64) & np.uint64(1)) == 0)
    return np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


# target -> the source dtypes NumPy's own cast rounds into it once (C casts).
_NUMPY_ROUNDED = {F64: (np.dtype(np.float16), F32, LONGDOUBLE), F32: (np.dtype(np.float16), F64, LONGDOUBLE)}


def round_float(x, dtype) -> np.ndarray:
    """``x`` (an array of any float dtype) rounded once, to nearest even, into the float ``dtype``,
    as XLA's convert does; overflow gives ``dtype``'s overflow value (inf, NaN for the finite-only
    float8 types, the largest value for float4_e2m1fn, which also turns NaN into -0.0). An array
    already of ``dtype`` is returned as it is (not copied).

    NumPy's casts between float16/32/64 and long double -> float32/float64 round once; narrower
    targets from float64 or long double go through :func:`round_to_odd` to float32. (The NumPy
    casts are fast paths, taken without an errstate of their own: an overflow warns as the
    caller's errstate says. The rest runs under errstate(all="ignore").)"""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    src = x.dtype
    if src == dtype:
        return x
    if dtype in _NUMPY_ROUNDED and src in _NUMPY_ROUNDED[dtype]:
        return x.astype(dtype)
    if dtype == F16 and src == F64:
        out = x.astype(F16)                # NumPy's double -> half rounds once (npy_double_to_half)
        nan = np.isnan(x)
        if nan.any():                      # NaN through float32 as below (a quiet NaN, its top bits)
            with np.errstate(invalid="ignore"):
                out = np.where(nan, x.astype(F32).astype(F16), out)
        return out
    with np.errstate(all="ignore"):
        if src == E8M0:
            x = x.astype(F32)          # exact; ml_dtypes casts e8m0fnu only to/from NumPy floats
        elif src in (F64, LONGDOUBLE) and dtype not in (F32, F64, LONGDOUBLE):   # (fewer than 24 bits)
            x = round_to_odd(x, F32)   # one rounding in the end (see round_to_odd)
        elif dtype == E8M0 and src in dtypes.ML_FLOATS:
            x = x.astype(F32)
        out = x.astype(dtype)
        if dtype == F4:
            # float4_e2m1fn has no NaN: XLA gives -0.0 for a NaN input.
            out = np.where(np.isnan(x), np.array(-0.0, dtype), out).astype(dtype)
    return out


def convert(x, dtype) -> np.ndarray:
    """XLA's ConvertElementType of ``x`` to ``dtype``: the one conversion every rule rounds a value
    into a dtype with (spec/lax_conversions.py states each case and its source):

    - int -> int: two's complement wrap-around to the target width (int2/int4 included).
    - int/float -> float: the exact value rounded once, to nearest even, with the target type's
      overflow behaviour (inf, NaN or saturation), as ml_dtypes and XLA do (:func:`round_float`).
    - float -> int: NaN -> 0; ``x >= T(INT_MAX)`` -> INT_MAX and ``x <= T(INT_MIN)`` -> INT_MIN
      where ``T(v)`` is the integer bound rounded into the *source* float type (XLA compares in the
      source type, so float4_e2m1fn 6.0 -> int8 gives 127); otherwise truncation toward zero.
    - complex -> real: the real part, then as above. Anything -> bool: ``x != 0`` (NaN -> True).
    """
    x = np.asarray(x)
    dst = np.dtype(dtype)
    src = x.dtype
    if src == dst:
        return x
    if dtypes.is_complex(src):
        if dtypes.is_complex(dst):
            return x.astype(dst)   # componentwise, each rounded once to nearest even
        x = np.real(x)
        src = x.dtype
        if src == dst:
            return x.copy()
    if dtypes.is_bool(dst):
        if dtypes.is_int(src):
            return x != np.zeros((), src)
        return _as_exact_float(x) != 0   # (0 is not an e8m0fnu value: compare exactly)
    if dtypes.is_complex(dst):
        part = convert(x, dtypes.component_dtype(dst))
        return part.astype(dst)
    if dtypes.is_bool(src):
        x = x.astype(np.uint8)
        src = x.dtype
    if dtypes.is_int(src):
        if dtypes.is_int(dst):
            return wrap_int(to_wide_int(x), dst)
        return _int_to_float(x, dst)
    if dtypes.is_int(dst):
        return _float_to_int(x, dst)
    with np.errstate(all="ignore"):
        return round_float(x, dst)


def _int_to_float(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dst in dtypes.ML_FLOATS:
            # ml_dtypes would go through float32 (double rounding for 64-bit integers); an exact
            # float64 (or a round-to-odd one, see _int64_to_odd_float64) rounds once instead.
            wide = _int64_to_odd_float64(x) if x.dtype.itemsize == 8 else x.astype(np.float64)
            return round_float(wide, dst)
        return x.astype(dst)   # NumPy's C casts: one rounding to nearest even


def _int64_to_odd_float64(x: np.ndarray) -> np.ndarray:
    """64-bit integers as float64 rounded to odd at bit 11 when |x| >= 2**53.

    Keeping the dropped bits as a sticky last bit leaves >= 42 significant bits, so one more
    rounding to any format of <= 40 bits is the correctly rounded result (round-to-odd theorem).
    """
    neg = x < 0
    mag = np.where(neg, (-(x.astype(np.int64) + 1)).astype(np.uint64) + np.uint64(1),
                   x.astype(np.uint64)) if dtypes.is_signed(x.dtype) else x.astype(np.uint64)
    big = mag >= np.uint64(1 << 53)
    q = (mag >> np.uint64(11)) | ((mag & np.uint64(0x7FF)) != 0).astype(np.uint64)
    val = np.where(big, q.astype(np.float64) * 2048.0, mag.astype(np.float64))
    return np.where(neg, -val, val)


def _as_exact_float(x: np.ndarray) -> np.ndarray:
    """A float array in a NumPy type that holds all its values exactly (float64 or long double)."""
    if x.dtype == E8M0:
        return x.astype(np.float32).astype(np.float64)
    return x.astype(np.longdouble if x.dtype == np.float64 else np.float64)


def _float_to_int(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    info = dtypes.iinfo(dst)
    wide_int = np.uint64 if dtypes.is_unsigned(dst) else np.int64
    with np.errstate(all="ignore"):
        # XLA clamps against the integer bounds rounded into the *source* float type.
        hi = _as_exact_float(convert(np.array(int(info.max), wide_int), x.dtype))
        lo = _as_exact_float(convert(np.array(int(info.min), np.int64), x.dtype))
        xv = _as_exact_float(x)
        above, below, nan = xv >= hi, xv <= lo, np.isnan(xv)
        inside = ~(above | below | nan)
        t = np.trunc(np.where(inside, xv, 0)).astype(wide_int)   # exact: |t| < 2**64 inside
        out = np.where(above, wide_int(info.max), np.where(below, wide_int(info.min), t))
        out = np.where(nan, wide_int(0), out)
    return wrap_int(out.astype(wide_int), dst)


# IEEE-like types whose bits reduce_precision manipulates directly: (total, exponent, mantissa) bits.
BIT_LAYOUT = {np.dtype(np.float16): (16, 5, 10), dtypes.bfloat16: (16, 8, 7),
                  np.dtype(np.float32): (32, 8, 23), np.dtype(np.float64): (64, 11, 52)}


def reduce_precision_bits(u: np.ndarray, layout: tuple[int, int, int], exponent_bits: int,
                          mantissa_bits: int) -> np.ndarray:
    """XLA's EmitReducePrecisionIR (quiet_nans=false) on the bits ``u`` (uint64) of a float.

    Mantissa: round to nearest even by adding a bias and truncating (a carry into the exponent is
    the right result). Exponent: values above the reduced range become +-inf, values at or below
    its minimum normal exponent become +-0 (reduced subnormals are flushed). NaN stays the input.
    """
    nbits, src_e, src_m = layout
    full = np.uint64((1 << nbits) - 1)
    sign_mask = np.uint64(1 << (nbits - 1))
    exp_mask = np.uint64(((1 << src_e) - 1) << src_m)
    x = u
    is_nan = (x & ~sign_mask & full) > exp_mask
    if mantissa_bits < src_m:
        last = np.uint64(1 << (src_m - mantissa_bits))
        bias = (last >> np.uint64(1)) - np.uint64(1)
        last_bit = (x & last) >> np.uint64(src_m - mantissa_bits)
        x = ((x + last_bit + bias) & ~(last - np.uint64(1))) & full
    if exponent_bits < src_e:
        src_bias = (1 << (src_e - 1)) - 1
        red_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = np.uint64((src_bias + red_bias) << src_m)
        min_exp = np.uint64((src_bias - red_bias) << src_m)
        e = x & exp_mask
        signed_zero = x & sign_mask
        x = np.where(e > max_exp, signed_zero | exp_mask, x)
        x = np.where(e <= min_exp, signed_zero, x)
    # NaN stays NaN (XLA:CPU keeps the input NaN, also with mantissa_bits == 0 where the old
    # emitter selected infinity: confirmed against XLA:CPU in the tests)
    return np.where(is_nan, u, x)


# --------------------------------------------------------------------------------------------
# Integers: two's complement wrap-around.

def to_wide_int(x) -> np.ndarray:
    """An integer array as int64 (signed or narrower unsigned) or uint64 (uint64)."""
    x = np.asarray(x)
    if x.dtype == np.uint64:
        return x
    return x.astype(np.int64)


def sign_extend(v: np.ndarray, nbits: int) -> np.ndarray:
    """Integers 0 <= v < 2**nbits (an int64 array) read as ``nbits``-bit two's complement."""
    return np.where(v >= 1 << (nbits - 1), v - (1 << nbits), v)


def wrap_int(v, dtype) -> np.ndarray:
    """Integers (an integer array; int64/uint64 results of NumPy arithmetic are wrapped mod
    2**64 already) wrapped two's complement into the integer ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype in dtypes.ML_INTS or dtype in dtypes.ML_UINTS:
        bits = dtypes.bit_width(dtype)
        v = np.asarray(v).astype(np.int64) & ((1 << bits) - 1)
        if dtypes.is_signed(dtype):
            v = sign_extend(v, bits)
        return v.astype(dtype)
    return np.asarray(v).astype(dtype)   # NumPy's integer casts wrap two's complement


def int_wrapper(nbits: int, signed: bool):
    """A function wrapping a Python int two's complement to ``nbits`` bits (signed or not): wrap_int
    for the rank-0 fast paths, which compute on Python integers."""
    mask, half = (1 << nbits) - 1, 1 << (nbits - 1)
    if signed:
        return lambda v: ((v + half) & mask) - half
    return lambda v: v & mask


# --------------------------------------------------------------------------------------------
# Ordering keys: max/min compare with -0.0 < +0.0 and propagate NaN (XLA's max/min).

def widen_narrow_float(x: np.ndarray) -> np.ndarray:
    """Floats narrower than float32 widened exactly to float32 (order and values kept)."""
    if dtypes.is_float(x.dtype) and x.dtype not in (F32, F64):
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


# --------------------------------------------------------------------------------------------
# Exact values rounded once.

def round_exact(n: int, e: int, dtype) -> np.ndarray:
    """The exact value ``n * 2**e`` (Python ints) rounded to nearest-even in float ``dtype``.
    An exact zero is +0 (every sum starts from XLA's +0 init value)."""
    dtype = np.dtype(dtype)
    if n == 0:
        return np.zeros((), dtype)
    fi = dtypes.finfo(dtype)
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


def round_fraction(fr, dtype):
    """An exact rational (or +-inf) rounded once to the float ``dtype``."""
    if not isinstance(fr, Fraction):
        return np.array(fr, F64).astype(dtype)
    try:
        f = float(fr)                      # CPython: correctly rounded, subnormals included
    except OverflowError:
        return np.array(math.inf if fr > 0 else -math.inf, F64).astype(dtype)
    if np.dtype(dtype) == F64:
        return np.array(f, F64)
    if Fraction(f) != fr and (np.array(f, F64).view(np.uint64) & 1) == 0:
        f = float(np.nextafter(f, math.inf if Fraction(f) < fr else -math.inf))  # round to odd
    with np.errstate(over="ignore"):
        return round_float(np.array(f, F64), dtype)


def _mpf_float64(v, odd: bool) -> float:
    """An mpmath real rounded to float64 (subnormals included; exact integer arithmetic): to
    nearest even, or with round-to-odd (the last bit sticky: see :func:`round_to_odd`)."""
    sign, man, exp, bc = v._mpf_
    if not man:
        if exp == 0 or v == 0:
            return 0.0
        return float(v)                   # +-inf or nan
    e = exp + bc - 1                      # floor(log2 |v|)
    q = max(e, -1022) - 52                # exponent of the last significand bit
    if exp >= q:
        n = man << (exp - q)
    elif q - exp > bc + 2:
        # far below the last bit: sticky only (odd); below half of the smallest subnormal (nearest)
        n = 1 if odd else 0
    else:
        shift = q - exp
        n, rem = divmod(man, 1 << shift)
        if odd:
            n |= 1 if rem else 0          # sticky bit: round to odd
        else:
            half = 1 << (shift - 1)
            if rem > half or (rem == half and n & 1):
                n += 1
    try:
        out = math.ldexp(n, q)
    except OverflowError:
        out = math.inf
    return -out if sign else out


def mp_round(values, dtype) -> np.ndarray:
    """mpmath reals (a list) rounded once to ``dtype``: to float64 directly, to narrower floats
    through round-to-odd float64 and :func:`round_float`."""
    dtype = np.dtype(dtype)
    if dtype == F64:
        return np.array([_mpf_float64(v, odd=False) for v in values], dtype=F64)
    with np.errstate(over="ignore"):
        return round_float(np.array([_mpf_float64(v, odd=True) for v in values], dtype=F64), dtype)


class Uncertified(ArithmeticError):
    """The reference cannot certify the correctly rounded value (cost cap, an expansion that does
    not reach the precision, mpmath's NoConvergence): the rule raises UnsupportedPrimitiveError."""


def ziv(enclose, dtype, what, precs=range(96, 1025, 64)):
    """The correctly rounded value from enclosures (Ziv's test; also the FFT's mpmath tier):
    ``enclose(prec)`` gives (value, radius) with the exact result inside value +- radius, or None
    (give up), for each precision of ``precs`` in turn; accepted when both ends round alike."""
    u = dtypes.storage_uint(dtype)
    for prec in precs:
        iv = enclose(prec)
        if iv is None:
            break
        v, r = iv
        with mpmath.workprec(prec + 64):
            r = r * 1.25 + abs(v) * mpmath.mpf(2) ** -(prec + 32)   # the two roundings of v +- r
            lo, hi = mp_round([v - r, v + r], dtype)
        if lo.view(u) == hi.view(u):
            return lo
    raise Uncertified(f"{what}: not certified up to {precs[-1]} bits (the enclosure is too wide)")


# --------------------------------------------------------------------------------------------
# Whether an approximation decides its correct rounding.

# Output formats whose rounding of a float64 is decided from its bits (_undecided_bits): IEEE-like
# (a binade of 2**(p-1) values, overflow to inf at the top binade's midpoint, gradual underflow).
_BIT_TESTED = (F32, np.dtype(np.float16), dtypes.bfloat16)


def _undecided_bits(w, rel, dtype) -> np.ndarray:
    """``rounding_undecided`` for a float64 ``w`` and a narrower IEEE-like ``dtype``, on the bits of ``w``.

    Where the correctly rounded result is a normal number of ``dtype`` (p significand bits), ``w``
    and the exact value lie in one binade [2**E, 2**(E+1)) of float64 or straddle its edge, whose
    ``dtype`` neighbours are 2**(k-2) float64 ulps away from any midpoint (k = 53 - p). There the
    ``dtype`` midpoints are exactly the float64s whose low k bits are 1 << (k-1), and the radius
    rel*|w| < rel*2**(E+1) = rel*2**53 float64 ulps of the binade: the rounding is decided unless the
    low k bits are within ``tol`` = ceil(rel*2**53) of that pattern (ties counted as undecided). The
    overflow threshold is the midpoint above the largest finite value (the same pattern in the top
    binade); above the top binade every value of the interval overflows alike. Results below the
    smallest normal (subnormal outputs, float64 subnormals, zeros) are left to the generic test.
    E.g. exp: np.exp (glibc) is within 1 ulp (2**-52 relative), bounded by Fn's default 2**-44, so
    tol = 512 float64 ulps and about 2**-19 of float32 results (2**-35 of bfloat16) go to mpmath.
    """
    fi = dtypes.finfo(dtype)
    k = 52 - fi.nmant
    tol = math.ceil(rel * 2.0 ** 53)
    assert 4 * tol < 1 << (k - 2), (rel, dtype)   # midpoints far from the binade edges
    half = 1 << (k - 1)
    w = np.asarray(w)
    low = np.asarray(w.view(np.uint64) & np.uint64((1 << k) - 1))
    # |low - half| <= tol as one unsigned comparison (below half - tol wraps around to huge)
    np.subtract(low, np.uint64(half - tol), out=low)
    out = np.asarray(low <= np.uint64(2 * tol))
    # 0 < |w| < 2**minexp, as one unsigned comparison on the bits of |w| (zero wraps around to huge)
    tiny = np.asarray(np.abs(w)).view(np.uint64)
    np.subtract(tiny, np.uint64(1), out=tiny)
    tiny = tiny < np.uint64(np.float64(2.0 ** fi.minexp).view(np.uint64) - 1)
    flat = out.reshape(-1)
    if flat.any():
        idx = np.flatnonzero(flat)
        # near a midpoint pattern: undecided only inside the normal range (NaN / inf / above the
        # top binade: decided; below: the generic test)
        a = np.abs(w.reshape(-1)[idx])
        flat[idx] = (a >= 2.0 ** fi.minexp) & (a < 2.0 ** fi.maxexp)
    if tiny.any():
        ti = np.flatnonzero(tiny)
        flat[ti] = _undecided_generic(w.reshape(-1)[ti], rel, dtype)
    return out


def rounding_undecided(w, rel, dtype) -> np.ndarray:
    """Elements whose correct rounding is not decided by ``w`` with relative error <= ``rel``."""
    if np.asarray(w).dtype == F64 and np.dtype(dtype) in _BIT_TESTED:
        return _undecided_bits(w, rel, dtype)
    return _undecided_generic(w, rel, dtype)


def _undecided_generic(w, rel, dtype) -> np.ndarray:
    """``rounding_undecided`` by rounding both ends of the interval ``w * (1 -+ rel)`` to ``dtype``."""
    with np.errstate(all="ignore"):
        d = np.abs(w) * w.dtype.type(rel)
        lo, hi = round_float(w - d, dtype), round_float(w + d, dtype)
        u = dtypes.storage_uint(dtype)
        return np.isfinite(w) & (w != 0) & (lo.view(u) != hi.view(u))


# --------------------------------------------------------------------------------------------
# Certified rounding of exact sums and products.

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


def wide_type(*input_dtypes) -> np.dtype:
    """float64 when every term (product) of these input dtypes is exact in float64 (mantissa
    bits add up to <= 53), else long double."""
    return _wide_type(tuple(np.dtype(dt) for dt in input_dtypes))


@functools.lru_cache(maxsize=None)
def _wide_type(input_dtypes) -> np.dtype:
    bits = sum(significand_bits(dt) for dt in input_dtypes)
    return F64 if bits <= 53 else LONGDOUBLE


@functools.lru_cache(maxsize=None)
def significand_bits(dtype) -> int:
    """p such that every value x of ``dtype`` (float, integer, bool; complex: each part) is an
    integer multiple of 2**(e - p), e its binary exponent (x = f 2**e, 1/2 <= |f| < 1, np.frexp):
    the significand's digits (subnormals are multiples of a larger power of two), an integer
    type's bit width."""
    dtype = np.dtype(dtype)
    if dtypes.is_float(dtype):
        return int(dtypes.finfo(dtype).nmant) + 1
    if dtypes.is_complex(dtype):
        return 24 if dtype == np.complex64 else 53
    return dtypes.bit_width(dtype)


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
    uint = dtypes.storage_uint(out_dtype)
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

