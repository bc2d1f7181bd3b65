"""convert_element_type between dtype pairs, bitcast_convert_type, reduce_precision: bit-exact,
including NaN/inf/overflow/saturation edge cases (special values of the source dtype)."""
from __future__ import annotations

import numpy as np
from jax import lax

from interp import dtypes as D

from ..case import Case, dtype_id, random_array
from ._elementwise import (BOOL, BF16, F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, X64)

E4M3, E5M2 = np.dtype(D.ML_FLOATS[1]), np.dtype(D.ML_FLOATS[2])   # float8_e4m3fn, float8_e5m2
F4 = next((d for d in D.ML_FLOATS if d.name == "float4_e2m1fn"), None)
E8M0 = next((d for d in D.ML_FLOATS if d.name == "float8_e8m0fnu"), None)

CONVERT_QUICK = {
    F32: (I32, U8, I8, U32, BF16, F16, E4M3, E5M2, BOOL),
    BF16: (F32, F16, I8),
    F16: (F32, BF16, E5M2),
    I32: (F32, BF16, F16, U8, I8, BOOL),
    U32: (F32, I32),
    BOOL: (F32, I32),
    E4M3: (F32, BF16),
}
CONVERT_NIGHTLY = {
    F32: (F64, I64, U16, I16) + tuple(d for d in (F4, E8M0) if d is not None),
    F64: (F32, BF16, F16, I32, I64, U8),
    I64: (F32, F64, I32),
    E5M2: (F32, F16),
}
BITCASTS = ((F32, I32), (F32, U32), (I32, F32), (BF16, I16), (F16, U16), (U32, F32))


def _convert_case(src, dst, profile, shape):
    fn = lambda x: lax.convert_element_type(x, dst)   # noqa: E731
    if shape == "specials":
        inputs = lambda rng: [_specials(src)]  # noqa: E731
    else:
        inputs = lambda rng: [random_array(rng, src, shape, low=-1e6, high=1e6)]  # noqa: E731
    sid = shape if isinstance(shape, str) else "x".join(map(str, shape))
    return Case(id=f"lax_conversions/convert_element_type/{dtype_id(src)}-{dtype_id(dst)}/{sid}", fn=fn,
                inputs=inputs, x64=src in X64 or dst in X64, primitives=("convert_element_type",),
                profile=profile)


def _edtype_round_trip(x):
    # convert_element_type to a convertible extended dtype and back: to_edtype / from_edtype,
    # through a call (lax.py; jax.experimental.primal_tangent_dtype allows conversion)
    import jax
    from jax.experimental import primal_tangent_dtype
    edtype = primal_tangent_dtype(BF16, F32)
    e = jax.jit(lambda v: v)(lax.convert_element_type(x, edtype))
    return lax.convert_element_type(e, BF16)


def _specials(dtype):
    from ..values import special_values
    vals = special_values(dtype)
    if D.is_float(dtype) and dtype.itemsize >= 2:
        # Values around every integer type's range and the fp8/f16 overflow thresholds.
        extra = np.array([255.5, 256.0, -128.5, 127.5, 2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, 65520.0,
                          65504.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 1e6, -1e6, 0.499999, 2.5, -2.5, 3.5],
                         np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            vals = np.concatenate([vals, extra.astype(dtype)])
    return vals


def cases():
    for table, profile in ((CONVERT_QUICK, "quick"), (CONVERT_NIGHTLY, "nightly")):
        for src, dsts in table.items():
            for dst in dsts:
                yield _convert_case(src, dst, profile, "specials")
                yield _convert_case(src, dst, profile if profile == "nightly" else "nightly", (4, 33))
    for src, dst in BITCASTS:
        yield Case(id=f"lax_conversions/bitcast_convert_type/{dtype_id(src)}-{dtype_id(dst)}/specials",
                   fn=lambda x, dst=dst: lax.bitcast_convert_type(x, dst),
                   inputs=lambda rng, src=src: [np.concatenate([_specials(src), random_array(rng, src, (20,))])],
                   primitives=("bitcast_convert_type",))
    yield Case(id="lax_conversions/to_from_edtype/bfloat16/specials", fn=_edtype_round_trip,
               inputs=lambda rng: [_specials(BF16)], primitives=("to_edtype", "from_edtype"))
    for e, m in ((5, 10), (8, 7), (4, 3), (5, 2)):
        yield Case(id=f"lax_conversions/reduce_precision/float32-e{e}m{m}/specials",
                   fn=lambda x, e=e, m=m: lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m),
                   inputs=lambda rng: [np.concatenate([_specials(F32), random_array(rng, F32, (40,), low=-1e5,
                                                                                     high=1e5)])],
                   primitives=("reduce_precision",))
