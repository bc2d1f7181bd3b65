"""Input values and bitwise comparison shared by the conformance cases and the project's tests.

Special values per dtype (NaN, +-inf, +-0, subnormals, integer extremes) and hypothesis strategies
that mix them into ordinary random arrays.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from interp import dtypes as D


def special_values(dtype) -> np.ndarray:
    """The values of ``dtype`` that edge cases are made of."""
    dtype = np.dtype(dtype)
    if D.is_bool(dtype):
        return np.array([False, True])
    if D.is_int(dtype):
        info = D.iinfo(dtype)
        vals = {int(info.min), int(info.max), 0, 1, -1, 2, -2, int(info.min) + 1, int(info.max) - 1}
        wide = np.int64 if D.is_signed(dtype) else np.uint64
        return np.array(sorted(v for v in vals if info.min <= v <= info.max), dtype=wide).astype(dtype)
    if D.is_complex(dtype):
        part = special_values(np.float32 if dtype == np.complex64 else np.float64)
        re, im = np.meshgrid(part, part[::3])
        out = np.empty(re.size, dtype)
        out.real, out.imag = re.ravel(), im.ravel()
        return out
    fi = D.finfo(dtype)
    vals = [0.0, 1.0, -1.0, 0.5, 2.0, float(fi.max), float(fi.tiny), float(fi.eps),
            float(fi.smallest_subnormal), 3.0, 1.5, 0.1, 100.0]
    vals += [-v for v in vals[3:]]
    vals += [np.inf, -np.inf, np.nan, -0.0]
    with np.errstate(all="ignore"):
        return np.unique(np.array(vals, dtype=np.float64).astype(dtype).view(D.storage_uint(dtype))).view(dtype)


def normalize_nans(x: np.ndarray) -> np.ndarray:
    """Give every NaN the same (canonical) payload so that bitwise comparison ignores payloads."""
    x = np.asarray(x)
    if D.is_float(x.dtype) or D.is_complex(x.dtype):
        x = x.copy()
        if D.is_complex(x.dtype):
            x.real[np.isnan(x.real)] = np.nan
            x.imag[np.isnan(x.imag)] = np.nan
        else:
            x[np.isnan(x)] = np.array(np.nan, dtype=x.dtype)
    return x


def bits(x: np.ndarray) -> np.ndarray:
    """The raw storage bits of ``x`` as unsigned integers, one per element (same shape)."""
    x = np.asarray(x)
    x = x if x.flags.c_contiguous else x.copy()  # (ascontiguousarray would make 0-d arrays 1-d)
    if D.is_bool(x.dtype):
        return x.view(np.uint8)
    if x.dtype.itemsize > 8:
        # complex128: there is no 128-bit integer type, and a uint64 view would double the last
        # axis (one value per element is what every caller indexes and compares): Python ints,
        # the real part's bits above the imaginary part's.
        re, im = bits(x.real).astype(object), bits(x.imag).astype(object)
        return np.asarray((re << 64) | im, dtype=object)
    return x.view(D.storage_uint(x.dtype))


def assert_same_bits(actual, expected, *, nan_payloads: bool = False, err_msg: str = "") -> None:
    """Bitwise equality of two arrays (shape and dtype too); NaN payloads ignored unless asked."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype} {err_msg}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape} {err_msg}"
    if not nan_payloads:
        actual, expected = normalize_nans(actual), normalize_nans(expected)
    a, e = bits(actual), bits(expected)
    bad = np.flatnonzero(a.ravel() != e.ravel())
    if bad.size:
        i = np.unravel_index(bad[0], actual.shape)
        raise AssertionError(
            f"{bad.size} of {actual.size} elements differ bitwise {err_msg}; first at index {i}: "
            f"actual {actual[i]!r} (bits {int(a[i]):#x}) vs expected {expected[i]!r} "
            f"(bits {int(e[i]):#x})")


def arrays(dtype, shape, *, specials: bool = True, elements=None):
    """Hypothesis strategy: arrays of ``dtype`` mixing random values with :func:`special_values`."""
    dtype = np.dtype(dtype)
    pool = special_values(dtype)
    if elements is None:
        if D.is_float(dtype) and dtype in D.ML_FLOATS:
            # ml_dtypes floats: draw random bit patterns, which covers every value.
            ubits = D.storage_uint(dtype)
            nbits = D.bit_width(dtype)
            elements = st.integers(0, 2 ** nbits - 1).map(lambda b: np.array(b, ubits).view(dtype)[()])
        elif D.is_int(dtype) and dtype in (D.ML_INTS + D.ML_UINTS):
            info = D.iinfo(dtype)
            elements = st.integers(int(info.min), int(info.max)).map(lambda v: np.array(v).astype(dtype)[()])
        else:
            elements = hnp.from_dtype(dtype, allow_nan=True, allow_infinity=True) if not D.is_bool(dtype) \
                else st.booleans()
    if specials:
        elements = st.one_of(elements, st.sampled_from(list(pool)))
    return hnp.arrays(dtype if dtype not in (D.ML_FLOATS + D.ML_INTS + D.ML_UINTS) else object,
                      shape, elements=elements).map(lambda a: np.asarray(a.tolist() if a.dtype == object else a,
                                                                          dtype=dtype) if a.dtype == object else a)
