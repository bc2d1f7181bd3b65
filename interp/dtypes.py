"""Dtype facts the rules share: classification, widths, and the wider types results are computed in.

JAX avals carry NumPy dtypes; the narrow ones (bfloat16, float8_*, float4_e2m1fn, int2/int4...) come
from ml_dtypes, which reports them all as kind 'V'. Classify through these helpers, never ``dtype.kind``.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

ML_FLOATS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in (
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn")
    if hasattr(ml_dtypes, n))
ML_INTS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("int2", "int4") if hasattr(ml_dtypes, n))
ML_UINTS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("uint2", "uint4") if hasattr(ml_dtypes, n))

FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)) + ML_FLOATS
SIGNED = ML_INTS + tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = ML_UINTS + tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))
BOOL = np.dtype(np.bool_)
ALL = (BOOL,) + SIGNED + UNSIGNED + FLOATS + COMPLEX
# The dtypes NumPy computes in natively (its own casts and arithmetic).
NATIVE_INTS = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                           np.uint8, np.uint16, np.uint32, np.uint64))
NATIVE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


_CATEGORIES: dict = {}


def _category(dtype) -> str:
    """'float' | 'signed' | 'unsigned' | 'complex' | 'bool' | 'other' (cached: rules ask per call)."""
    category = _CATEGORIES.get(dtype)
    if category is None:
        category = _CATEGORIES[dtype] = _classify(np.dtype(dtype))
    return category


def _classify(dtype: np.dtype) -> str:
    for name, members in (("float", FLOATS), ("signed", SIGNED), ("unsigned", UNSIGNED),
                          ("complex", COMPLEX)):
        if dtype in members:
            return name
    return "bool" if dtype == BOOL else "other"


def is_float(dtype) -> bool:
    return _category(dtype) == "float"


def is_signed(dtype) -> bool:
    return _category(dtype) == "signed"


def is_unsigned(dtype) -> bool:
    return _category(dtype) == "unsigned"


def is_int(dtype) -> bool:
    return _category(dtype) in ("signed", "unsigned")


def is_complex(dtype) -> bool:
    return _category(dtype) == "complex"


def is_bool(dtype) -> bool:
    return _category(dtype) == "bool"


def bit_width(dtype) -> int:
    """Bits of one element (int4 is 4, not its 8-bit storage)."""
    dtype = np.dtype(dtype)
    if dtype in ML_INTS or dtype in ML_UINTS:
        return ml_dtypes.iinfo(dtype).bits
    if dtype in ML_FLOATS:
        return ml_dtypes.finfo(dtype).bits
    if dtype == BOOL:
        return 1
    return dtype.itemsize * 8


def component_dtype(dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128, else the dtype itself."""
    dtype = np.dtype(dtype)
    if dtype == np.complex64:
        return np.dtype(np.float32)
    if dtype == np.complex128:
        return np.dtype(np.float64)
    return dtype


def finfo(dtype):
    return ml_dtypes.finfo(np.dtype(dtype))


def iinfo(dtype):
    return ml_dtypes.iinfo(np.dtype(dtype))


UINT_OF_BYTES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                 8: np.dtype(np.uint64)}
INT_OF_BYTES = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32),
                8: np.dtype(np.int64)}


def storage_uint(dtype) -> np.dtype:
    """The unsigned integer type with the same storage size (for bit views)."""
    return UINT_OF_BYTES[np.dtype(dtype).itemsize]


def wide_float(dtype) -> np.dtype:
    """The type in which a float op is computed so that one final rounding gives its result.

    float64 (53 bits) is more than 2p+2 bits for every float up to float32 (p=24), so an add, sub,
    mul, div or sqrt computed in float64 and rounded once is correctly rounded (no harmful double
    rounding). float64 itself is computed in long double where the platform has it.
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.dtype(np.longdouble)
    if dtype == np.complex128:
        return np.dtype(np.clongdouble)
    if dtype == np.complex64:
        return np.dtype(np.complex128)
    return np.dtype(np.float64)
