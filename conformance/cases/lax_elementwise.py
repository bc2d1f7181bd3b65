"""Arithmetic, comparison, bitwise, shifts, rounding, select, clamp, complex parts, pow:
every primitive x dtype x shape, and all pairs of special values (NaN, +-inf, +-0, subnormals,
integer extremes, division by zero, shifts out of range)."""
from __future__ import annotations

import numpy as np
from jax import lax
from jax._src.lax import lax as _lax_internal

from spec import compliance as C

from ._elementwise import (BOOL, BF16, C64, C128, F16, F32, F64, FLOATS, I8, I32, I64, INTS, U8, U32, U64,
                           Op, elementwise_cases, exhaustive_cases)

NUM = FLOATS + INTS
Q_NUM = (F32, BF16, F16, I32, U8, I8, U32)    # the quick dtypes
N_NUM = (F64, I64, U64)                       # nightly only
Q_INT, N_INT = (I32, U8, I8, U32), (I64, U64)
Q_FLT, N_FLT = (F32, BF16, F16), (F64,)


def _bool_first(i, dtype):
    return BOOL if i == 0 else dtype


def _same(i, dtype):
    return dtype


def _real_of(i, dtype):
    return F32 if dtype == C64 else F64


OPS = [
    Op("add", lax.add, 2, Q_NUM + (C64,), nightly_dtypes=N_NUM + (C128,)),
    Op("sub", lax.sub, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("mul", lax.mul, 2, Q_NUM, nightly_dtypes=N_NUM),
    # Complex multiply is a length-2 dot product per part (no IEEE rounding requirement).
    Op("mul_complex", lax.mul, 2, (C64,), nightly_dtypes=(C128,), mode=C.dot_product(2, "higham"),
       dot_bound=lambda a, b: [np.abs(a.astype(np.complex128)) * np.abs(b.astype(np.complex128))]),
    Op("div", lax.div, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("rem", lax.rem, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("max", lax.max, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("min", lax.min, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("nextafter", lax.nextafter, 2, (F32,), nightly_dtypes=(F64,)),
    Op("neg", lax.neg, 1, Q_NUM, nightly_dtypes=N_NUM),
    Op("square", lax.square, 1, (F32, BF16, I32), nightly_dtypes=(F16, F64, U8)),
    Op("mulhi", lax.mulhi, 2, (I32, U32, I8), nightly_dtypes=(I64, U64, U8)),
    Op("abs", lax.abs, 1, (F32, BF16, F16, I32, I8), nightly_dtypes=(F64, I64)),   # signed only
    Op("sign", lax.sign, 1, Q_NUM, nightly_dtypes=N_NUM),
    Op("floor", lax.floor, 1, Q_FLT, nightly_dtypes=N_FLT),
    Op("ceil", lax.ceil, 1, Q_FLT, nightly_dtypes=N_FLT),
    Op("round", lax.round, 1, Q_FLT, nightly_dtypes=N_FLT),
    Op("round_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), 1, Q_FLT,
       nightly_dtypes=N_FLT),
    Op("is_finite", lax.is_finite, 1, Q_FLT, nightly_dtypes=N_FLT),
    Op("integer_pow", lambda x: lax.integer_pow(x, 3), 1, (F32, I32, U8), nightly_dtypes=(F64, BF16, I64)),
    Op("integer_pow_neg", lambda x: lax.integer_pow(x, -2), 1, (F32,), nightly_dtypes=(F64, F16)),
    Op("and", lax.bitwise_and, 2, Q_INT + (BOOL,), nightly_dtypes=N_INT),
    Op("or", lax.bitwise_or, 2, Q_INT + (BOOL,), nightly_dtypes=N_INT),
    Op("xor", lax.bitwise_xor, 2, Q_INT + (BOOL,), nightly_dtypes=N_INT),
    Op("not", lax.bitwise_not, 1, Q_INT + (BOOL,), nightly_dtypes=N_INT),
    Op("shift_left", lax.shift_left, 2, Q_INT, nightly_dtypes=N_INT),
    Op("shift_right_logical", lax.shift_right_logical, 2, Q_INT, nightly_dtypes=N_INT),
    Op("shift_right_arithmetic", lax.shift_right_arithmetic, 2, Q_INT, nightly_dtypes=N_INT),
    Op("population_count", lax.population_count, 1, Q_INT, nightly_dtypes=N_INT),
    Op("clz", lax.clz, 1, Q_INT, nightly_dtypes=N_INT),
    Op("eq", lax.eq, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("ne", lax.ne, 2, (F32, I32), nightly_dtypes=(BF16, F64)),
    Op("lt", lax.lt, 2, Q_NUM, nightly_dtypes=N_NUM),
    Op("le", lax.le, 2, (F32, U32), nightly_dtypes=(F16, F64)),
    Op("gt", lax.gt, 2, (F32, I8), nightly_dtypes=(BF16, F64)),
    Op("ge", lax.ge, 2, (F32, U8), nightly_dtypes=(F16, F64)),
    # Total-order comparisons (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN), the comparators
    # of sort; no lax API binds them, so the primitives are bound directly.
    Op("eq_to", lambda x, y: _lax_internal.eq_to_p.bind(x, y), 2, (F32, BF16, I32), nightly_dtypes=(F16, F64, U8)),
    Op("le_to", lambda x, y: _lax_internal.le_to_p.bind(x, y), 2, (F32, BF16, I32), nightly_dtypes=(F16, F64, U8)),
    Op("lt_to", lambda x, y: _lax_internal.lt_to_p.bind(x, y), 2, (F32, BF16, I32), nightly_dtypes=(F16, F64, U8)),
    Op("select_n", lax.select_n, 3, (F32, I32), in_dtype=_bool_first, nightly_dtypes=(BF16, F64)),
    Op("clamp", lax.clamp, 3, (F32, I32), nightly_dtypes=(BF16, U8, F64)),
    Op("pow", lax.pow, 2, (F32,), nightly_dtypes=(BF16, F16, F64)),
    Op("real", lax.real, 1, (C64,), nightly_dtypes=(C128,)),
    Op("imag", lax.imag, 1, (C64,), nightly_dtypes=(C128,)),
    Op("conj", lax.conj, 1, (C64,), nightly_dtypes=(C128,)),
    Op("complex", lax.complex, 2, (C64,), in_dtype=_real_of, specials=True, nightly_dtypes=(C128,)),
]


# Every value pair of the one-byte floats (XLA computes them in float32 and rounds once: exact).
EXHAUSTIVE = ("add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign", "floor", "ceil", "round",
              "eq", "lt")


def cases():
    yield from exhaustive_cases("lax_elementwise", [op for op in OPS if op.primitive in EXHAUSTIVE])
    for case in elementwise_cases("lax_elementwise", OPS):
        # The primitive names of the two variants are the lax ones.
        prim = {"round_even": "round", "integer_pow_neg": "integer_pow", "mul_complex": "mul"}.get(case.primitives[0])
        if prim:
            import dataclasses
            case = dataclasses.replace(case, primitives=(prim,))
        yield case
