"""Rules: convert_element_type, bitcast_convert_type, reduce_precision, to_edtype, from_edtype.

convert_element_type is XLA's ConvertElementType, :func:`interp.numerics.convert`: the one
conversion every rule of the interpreter uses to round a value into a dtype (it lives with the
rest of the numerics; spec/lax_conversions.py states each case and its source). reduce_precision
is :func:`interp.numerics.reduce_precision_bits` on the bits of the value.

``to_edtype``/``from_edtype`` (convert_element_type to or from an extended dtype) move the
representation into or out of an :class:`interp.extended.ExtendedArray`, bit for bit.
"""
from __future__ import annotations

import numpy as np

from interp import dtypes
from interp.extended import ExtendedArray
from interp.numerics import BIT_LAYOUT, c_order, convert, reduce_precision_bits, wrap_int
from interp.registry import register


# --- plan-time fast paths -----------------------------------------------------------------------
# Where every value of the source dtype is a value of the target dtype, NumPy's astype is the
# conversion (no rounding, no wrap-around, no saturation: the value is kept), so ``prepare`` plans it
# without convert's per-call dispatch (which costs tens of microseconds on a scalar).

def _int_bits(dtype) -> int:
    """Bits of magnitude an integer dtype needs: its values are < 2**bits in absolute value, except
    a signed minimum -2**bits (a power of two: exact in any float format with the range)."""
    return dtypes.bit_width(dtype) - (1 if dtypes.is_signed(dtype) else 0)


def _value_preserving(src: np.dtype, dst: np.dtype) -> bool:
    """Every value of the native dtype ``src`` is exactly a value of the native dtype ``dst``."""
    if dtypes.is_bool(src):
        return dst in dtypes.NATIVE_INTS or dst in dtypes.NATIVE_FLOATS          # 0 and 1
    if src in dtypes.NATIVE_INTS:
        if dst in dtypes.NATIVE_INTS:
            # wider of the same signedness, or unsigned into a strictly wider signed type
            return (_int_bits(src) <= _int_bits(dst)
                    and (dtypes.is_signed(dst) or not dtypes.is_signed(src)))
        if dst in dtypes.NATIVE_FLOATS:
            # significand p bits and the range hold every magnitude (float16: 65504 >= 2**11)
            return _int_bits(src) <= dtypes.finfo(dst).nmant + 1
        return False
    if src in dtypes.NATIVE_FLOATS and dst in dtypes.NATIVE_FLOATS:
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
    return None


@register("convert_element_type", prepare=_prepare_convert)
def convert_element_type(eqn, x, *, new_dtype, weak_type, sharding):
    # weak_type is a typing flag of the result (its values are new_dtype's); sharding places it.
    return convert(x, new_dtype)


# --- bitcast_convert_type ---------------------------------------------------------------------

def _logical_bits(x: np.ndarray) -> np.ndarray:
    """The element bits of ``x`` as unsigned integers of its storage size (sub-byte types masked)."""
    x = c_order(x)
    u = x.view(dtypes.storage_uint(x.dtype))
    nbits = dtypes.bit_width(x.dtype)
    if nbits < 8 * x.dtype.itemsize:
        u = u & u.dtype.type((1 << nbits) - 1)
    return u


def _from_logical_bits(u: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Elements of ``dtype`` from their bits held in an unsigned integer array."""
    nbits = dtypes.bit_width(dtype)
    if nbits < 8 * dtype.itemsize and dtypes.is_signed(dtype):
        # ml_dtypes stores a sub-byte signed integer sign-extended in its byte
        return wrap_int(u.astype(np.uint64), dtype)
    return c_order(u.astype(dtypes.storage_uint(dtype))).view(dtype)


@register("bitcast_convert_type")
def bitcast_convert_type(eqn, x, *, new_dtype):
    src, dst = x.dtype, np.dtype(new_dtype)
    if src == dst:
        return x
    n_src, n_dst = dtypes.bit_width(src), dtypes.bit_width(dst)
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

@register("reduce_precision")
def reduce_precision(eqn, x, *, exponent_bits, mantissa_bits):
    dtype = x.dtype
    if dtype in BIT_LAYOUT:
        layout = BIT_LAYOUT[dtype]
        u = c_order(x).view(dtypes.storage_uint(dtype)).astype(np.uint64)
        out = reduce_precision_bits(u, layout, exponent_bits, mantissa_bits)
        return out.astype(dtypes.storage_uint(dtype)).view(dtype)
    if dtypes.is_float(dtype):
        # the other narrow floats: XLA:CPU upcasts (exactly) to float16 where every value fits,
        # else to float32, reduces there, and converts the result back (rounding to nearest even)
        fi = dtypes.finfo(dtype)
        fits16 = float(fi.max) <= 65504.0 and float(fi.smallest_subnormal) >= 2.0 ** -24
        wide = np.dtype(np.float16 if fits16 else np.float32)
        f = convert(x, wide)
        u = c_order(f).view(dtypes.storage_uint(wide)).astype(np.uint64)
        out = reduce_precision_bits(u, BIT_LAYOUT[wide], exponent_bits, mantissa_bits)
        return convert(out.astype(dtypes.storage_uint(wide)).view(wide), dtype)
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
