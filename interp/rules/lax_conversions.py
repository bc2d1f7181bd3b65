"""Rules: convert_element_type, bitcast_convert_type, reduce_precision.

``convert(x, dtype)`` is the one conversion every rule of the interpreter uses to round a value into
a dtype (elementwise arithmetic computes in a wider type and rounds once through it). It
reproduces XLA's convert exactly; spec/lax_conversions.py states each case and its source:

- int -> int: two's complement wrap-around to the target width (int2/int4 included).
- int/float -> float: the exact value rounded once, to nearest even, with the target type's
  overflow behaviour (inf, NaN or saturation), as ml_dtypes and XLA do.
- float -> int: NaN -> 0; ``x >= T(INT_MAX)`` -> INT_MAX and ``x <= T(INT_MIN)`` -> INT_MIN where
  ``T(v)`` is the integer bound rounded into the *source* float type (XLA compares in the source
  type, so float4_e2m1fn 6.0 -> int8 gives 127); otherwise truncation toward zero.
- complex -> real: the real part, then as above. Anything -> bool: ``x != 0`` (NaN -> True).

``to_edtype``/``from_edtype`` (convert_element_type to or from an extended dtype) move the
representation into or out of an :class:`interp.extended.ExtendedArray`, bit for bit.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from interp import dtypes as D
from interp.extended import ExtendedArray
from interp.registry import register

_F4 = np.dtype(ml_dtypes.float4_e2m1fn) if hasattr(ml_dtypes, "float4_e2m1fn") else None
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu) if hasattr(ml_dtypes, "float8_e8m0fnu") else None


def _c_order(x) -> np.ndarray:
    """``x`` as a C-contiguous array of the same shape (0-d stays 0-d, unlike np.ascontiguousarray),
    so that ``.view`` of another item type is allowed."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else np.array(x, order="C")


def component_dtype(dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128, else the dtype itself."""
    dtype = np.dtype(dtype)
    if dtype == np.complex64:
        return np.dtype(np.float32)
    if dtype == np.complex128:
        return np.dtype(np.float64)
    return dtype


def wrap_int(v: np.ndarray, dtype) -> np.ndarray:
    """Integers held in int64/uint64 (or any integer array) wrapped two's-complement into ``dtype``."""
    dtype = np.dtype(dtype)
    nbits = D.bit_width(dtype)
    u = np.asarray(v).astype(np.uint64)              # two's complement bits, wrapped mod 2**64
    if nbits < 64:
        u = u & np.uint64((1 << nbits) - 1)
        if D.is_signed(dtype):
            # sign-extend the low nbits to int64
            s = u.astype(np.int64)
            s = np.where(s >= (1 << (nbits - 1)), s - (1 << nbits), s)
            return s.astype(dtype)
        return u.astype(dtype)
    return u.view(np.int64).astype(dtype) if D.is_signed(dtype) else u.astype(dtype)


def to_wide_int(x: np.ndarray) -> np.ndarray:
    """An integer array as int64 (signed or narrower unsigned) or uint64 (uint64)."""
    x = np.asarray(x)
    if x.dtype == np.uint64:
        return x
    return x.astype(np.int64)


def _float_via(dtype) -> np.dtype:
    """A NumPy type that holds every value of a float dtype exactly (for comparisons/truncation)."""
    return np.dtype(np.longdouble) if np.dtype(dtype) == np.float64 else np.dtype(np.float64)


def _to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float64/long double rounded to float32 with round-to-odd (finite values saturate).

    An inexact result keeps a sticky odd last bit, so one more rounding to any format with at
    most 22 significand bits (and a range inside float32's) is the correctly rounded result of
    the original value: NumPy's own float64->float16 and ml_dtypes' float64->float8 casts go
    through float32 with two roundings, and XLA rounds once.
    """
    f = x.astype(np.float32)
    back = f.astype(x.dtype)
    inexact = (back != x) & ~np.isnan(x) & np.isfinite(x)
    even = (np.asarray(f).view(np.uint32) & np.uint32(1)) == 0
    toward = np.where(x > back, np.float32(np.inf), np.float32(-np.inf))
    return np.where(inexact & even, np.nextafter(f, toward), f).astype(np.float32)


def _float_to_float(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    src = x.dtype
    with np.errstate(all="ignore"):
        if src == _E8M0:
            x = x.astype(np.float32)          # exact; ml_dtypes casts e8m0fnu only to/from NumPy floats
        elif src in (np.float64, np.longdouble) and D.is_float(dst) and D.finfo(dst).nmant < 23:
            x = _to_odd_float32(x)            # one rounding in the end (see _to_odd_float32)
        elif dst == _E8M0 and src in D.ML_FLOATS:
            x = x.astype(np.float32)
        out = x.astype(dst)
        if dst == _F4:
            # float4_e2m1fn has no NaN: XLA gives -0.0 for a NaN input (ml_dtypes gives +0.0).
            out = np.where(np.isnan(x), np.array(-0.0, dst), out).astype(dst)
    return out


def _int_to_float(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dst in D.ML_FLOATS:
            # ml_dtypes would go through float32 (double rounding for 64-bit integers); an exact
            # float64 (or a round-to-odd one, see _int64_to_odd_float64) rounds once instead.
            wide = _int64_to_odd_float64(x) if x.dtype.itemsize == 8 else x.astype(np.float64)
            return _float_to_float(wide, dst)
        return x.astype(dst)   # NumPy's C casts: one rounding to nearest even


def _int64_to_odd_float64(x: np.ndarray) -> np.ndarray:
    """64-bit integers as float64 rounded to odd at bit 11 when |x| >= 2**53.

    Keeping the dropped bits as a sticky last bit leaves >= 42 significant bits, so one more
    rounding to any format of <= 40 bits is the correctly rounded result (round-to-odd theorem).
    """
    neg = x < 0
    mag = np.where(neg, (-(x.astype(np.int64) + 1)).astype(np.uint64) + np.uint64(1),
                   x.astype(np.uint64)) if D.is_signed(x.dtype) else x.astype(np.uint64)
    big = mag >= np.uint64(1 << 53)
    q = (mag >> np.uint64(11)) | ((mag & np.uint64(0x7FF)) != 0).astype(np.uint64)
    val = np.where(big, q.astype(np.float64) * 2048.0, mag.astype(np.float64))
    return np.where(neg, -val, val)


def _as_exact_float(x: np.ndarray) -> np.ndarray:
    """A float array in a NumPy type that holds all its values exactly (float64 or long double)."""
    if x.dtype == _E8M0:
        return x.astype(np.float32).astype(np.float64)
    return x.astype(np.longdouble if x.dtype == np.float64 else np.float64)


def _float_to_int(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    info = D.iinfo(dst)
    wide_int = np.uint64 if D.is_unsigned(dst) else np.int64
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


def convert(x, dtype) -> np.ndarray:
    """XLA's ConvertElementType of ``x`` to ``dtype`` (see the module docstring)."""
    x = np.asarray(x)
    dst = np.dtype(dtype)
    src = x.dtype
    if src == dst:
        return x
    if D.is_complex(src):
        if D.is_complex(dst):
            return x.astype(dst)   # componentwise, each rounded once to nearest even
        x = np.real(x)
        src = x.dtype
        if src == dst:
            return x.copy()
    if D.is_bool(dst):
        if D.is_int(src):
            return x != np.zeros((), src)
        return _as_exact_float(x) != 0   # (0 is not an e8m0fnu value: compare exactly)
    if D.is_complex(dst):
        part = convert(x, component_dtype(dst))
        return part.astype(dst)
    if D.is_bool(src):
        x = x.astype(np.uint8)
        src = x.dtype
    if D.is_int(src):
        if D.is_int(dst):
            return wrap_int(to_wide_int(x), dst)
        return _int_to_float(x, dst)
    if D.is_int(dst):
        return _float_to_int(x, dst)
    return _float_to_float(x, dst)


@register("convert_element_type")
def convert_element_type(eqn, x, *, new_dtype, weak_type, sharding):
    # weak_type is a typing flag of the result (its values are new_dtype's); sharding places it.
    return convert(x, new_dtype)


# --- plan-time fast paths -----------------------------------------------------------------------
# Where every value of the source dtype is a value of the target dtype, NumPy's astype is the
# conversion (no rounding, no wrap-around, no saturation: the value is kept), so ``prepare`` plans it
# without convert's per-call dispatch (which costs tens of microseconds on a scalar).

_NATIVE_INTS = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                            np.uint8, np.uint16, np.uint32, np.uint64))
_NATIVE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _int_bits(dtype) -> int:
    """Bits of magnitude an integer dtype needs: its values are < 2**bits in absolute value, except
    a signed minimum -2**bits (a power of two: exact in any float format with the range)."""
    return D.bit_width(dtype) - (1 if D.is_signed(dtype) else 0)


def _value_preserving(src: np.dtype, dst: np.dtype) -> bool:
    """Every value of the native dtype ``src`` is exactly a value of the native dtype ``dst``."""
    if D.is_bool(src):
        return dst in _NATIVE_INTS or dst in _NATIVE_FLOATS          # 0 and 1
    if src in _NATIVE_INTS:
        if dst in _NATIVE_INTS:
            # wider of the same signedness, or unsigned into a strictly wider signed type
            return (_int_bits(src) <= _int_bits(dst)
                    and (D.is_signed(dst) or not D.is_signed(src)))
        if dst in _NATIVE_FLOATS:
            # significand p bits and the range hold every magnitude (float16: 65504 >= 2**11)
            return _int_bits(src) <= D.finfo(dst).nmant + 1
        return False
    if src in _NATIVE_FLOATS and dst in _NATIVE_FLOATS:
        return src.itemsize <= dst.itemsize          # float16 -> float32 -> float64 widen exactly
    return False


def _astype_rule(dst: np.dtype):
    def rule(eqn, x, *, new_dtype, weak_type, sharding):
        return x.astype(dst)
    rule.__name__ = f"astype_{dst.name}"
    return rule


def _identity(eqn, x, *, new_dtype, weak_type, sharding):
    return x


def _prepare_convert(ctx):
    src, dst = getattr(ctx.in_avals[0], "dtype", None), ctx.out_dtype
    if (set(ctx.params) <= {"new_dtype", "weak_type", "sharding"}
            and isinstance(src, np.dtype) and isinstance(dst, np.dtype)):   # (not PRNG key types)
        if src == dst:
            return _identity                              # convert's identity
        if _value_preserving(src, dst):
            return _astype_rule(dst)
    return convert_element_type


convert_element_type.prepare = _prepare_convert


# --- bitcast_convert_type ---------------------------------------------------------------------

def _logical_bits(x: np.ndarray) -> np.ndarray:
    """The element bits of ``x`` as unsigned integers of its storage size (sub-byte types masked)."""
    x = _c_order(x)
    u = x.view(D.storage_uint(x.dtype))
    nbits = D.bit_width(x.dtype)
    if nbits < 8 * x.dtype.itemsize:
        u = u & u.dtype.type((1 << nbits) - 1)
    return u


def _from_logical_bits(u: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Elements of ``dtype`` from their bits held in an unsigned integer array."""
    nbits = D.bit_width(dtype)
    if nbits < 8 * dtype.itemsize and D.is_signed(dtype):
        # ml_dtypes stores a sub-byte signed integer sign-extended in its byte
        return wrap_int(u.astype(np.uint64), dtype)
    return _c_order(u.astype(D.storage_uint(dtype))).view(dtype)


@register("bitcast_convert_type")
def bitcast_convert_type(eqn, x, *, new_dtype):
    src, dst = x.dtype, np.dtype(new_dtype)
    if src == dst:
        return x
    n_src, n_dst = D.bit_width(src), D.bit_width(dst)
    u = _logical_bits(x).astype(np.uint64)
    if n_src == n_dst:
        return _from_logical_bits(u, dst)
    if n_src > n_dst:
        # one element becomes n_src // n_dst elements, least significant bits first (XLA's
        # little-endian element order: the new minor dimension indexes increasing bit offsets)
        k = n_src // n_dst
        shifts = np.arange(k, dtype=np.uint64) * np.uint64(n_dst)
        parts = (u[..., None] >> shifts) & np.uint64((1 << n_dst) - 1)
        return _from_logical_bits(parts, dst)
    k = n_dst // n_src
    shifts = np.arange(k, dtype=np.uint64) * np.uint64(n_src)
    whole = np.bitwise_or.reduce(u << shifts, axis=-1) if k > 1 else u[..., 0]
    return _from_logical_bits(np.asarray(whole, np.uint64), dst)


# --- reduce_precision -------------------------------------------------------------------------

# IEEE-like types whose bits reduce_precision manipulates directly: (total, exponent, mantissa) bits.
_NATIVE_LAYOUT = {np.dtype(np.float16): (16, 5, 10), D.bfloat16: (16, 8, 7),
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


@register("reduce_precision")
def reduce_precision(eqn, x, *, exponent_bits, mantissa_bits):
    dtype = x.dtype
    if dtype in _NATIVE_LAYOUT:
        layout = _NATIVE_LAYOUT[dtype]
        u = _c_order(x).view(D.storage_uint(dtype)).astype(np.uint64)
        out = reduce_precision_bits(u, layout, exponent_bits, mantissa_bits)
        return out.astype(D.storage_uint(dtype)).view(dtype)
    if D.is_float(dtype):
        # the other narrow floats: XLA:CPU upcasts (exactly) to float16 where every value fits,
        # else to float32, reduces there, and converts the result back (rounding to nearest even)
        fi = D.finfo(dtype)
        fits16 = float(fi.max) <= 65504.0 and float(fi.smallest_subnormal) >= 2.0 ** -24
        wide = np.dtype(np.float16 if fits16 else np.float32)
        f = convert(x, wide)
        u = _c_order(f).view(D.storage_uint(wide)).astype(np.uint64)
        out = reduce_precision_bits(u, _NATIVE_LAYOUT[wide], exponent_bits, mantissa_bits)
        return convert(out.astype(D.storage_uint(wide)).view(wide), dtype)
    raise eqn.unsupported(f"reduce_precision of {dtype}")


@register("to_edtype")
def to_edtype(eqn, x, *, edtype):
    # The operand is the representation (lax.py _to_edtype_abstract_eval: dtype
    # physical_element_aval(edtype).dtype, its shape as trailing dimensions); the lowering
    # returns it unchanged, so the value keeps its bits.
    rep = eqn.in_avals[0].ndim - eqn.out_aval.ndim
    return ExtendedArray(edtype, np.array(x, copy=True), rep)


@register("from_edtype")
def from_edtype(eqn, x, *, dtype):
    # The representation of the extended value, unchanged (lax.py from_edtype lowering: [x]).
    if not isinstance(x, ExtendedArray):
        raise eqn.unsupported(f"from_edtype of a {type(x).__name__} (the reference's extended "
                              "values of convertible dtypes are ExtendedArrays)")
    return np.array(x.data, dtype=dtype, copy=True)
