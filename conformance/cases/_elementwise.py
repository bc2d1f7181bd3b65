"""Generate elementwise cases from a table: every primitive x dtype x shape, plus one case per
(primitive, dtype) that applies the op to every combination of special values."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from interp import dtypes as D

from ..case import Case, dtype_id, random_array, shape_id, special_grid

F32, F16, F64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)
BF16 = D.bfloat16
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U16, U32, U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
BOOL = np.dtype(np.bool_)

FLOATS = (F32, BF16, F16, F64)
INTS = (I32, U8, I8, U32, I64, U64)
X64 = (F64, I64, U64, C128)

QUICK_SHAPES = ((3, 5),)
NIGHTLY_SHAPES = ((), (7,), (2, 3, 4), (1, 130), (33, 65), (0, 3))
# Rank 3 and a scalar are also in the quick profile, for the first dtype of each op only.
QUICK_FIRST_DTYPE_SHAPES = ((), (2, 3, 4))


@dataclasses.dataclass(frozen=True)
class Op:
    """One elementwise primitive: how to call it and on which dtypes."""
    primitive: str
    fn: Callable
    arity: int
    dtypes: tuple
    positive: bool = False       # draw non-negative inputs (besides specials)
    low: float | None = None
    high: float | None = None
    domains: tuple | None = None  # per operand (low, high), overriding low/high (betainc's x in [0, 1])
    specials: bool = True        # generate the all-pairs special-value case
    specials_profile: str = "quick"   # its smallest profile (XLA:CPU's igamma takes ~20 s on the grid)
    random_specials: float = 0.25     # fraction of special values among the random inputs
    quick_shapes: bool = True    # QUICK_FIRST_DTYPE_SHAPES in the quick profile (off where XLA compiles slowly)
    in_dtype: Callable | None = None  # dtype of operand i given the case dtype (default: same)
    nightly_dtypes: tuple = ()   # dtypes only in the nightly profile
    mode: object = None          # compliance mode (default: from the primitive and dtype)
    dot_bound: Callable | None = None
    not_applicable: str = ""     # Case.not_applicable of every case of the op (conformance.case.applicable_if)


def _inputs(op: Op, dtype, shape):
    def make(rng):
        out = []
        for i in range(op.arity):
            dt = op.in_dtype(i, dtype) if op.in_dtype else dtype
            low, high = op.domains[i] if op.domains else (op.low, op.high)
            out.append(random_array(rng, dt, shape, specials=op.random_specials, positive=op.positive, low=low,
                                    high=high))
        return out
    return make


def _special_inputs(op: Op, dtype):
    def make(rng):
        dts = [op.in_dtype(i, dtype) if op.in_dtype else dtype for i in range(op.arity)]
        if len(set(dts)) == 1:
            return special_grid(dts[0], op.arity)
        # Mixed operand dtypes (select_n's predicate, shifts...): specials of each, broadcast.
        pools = [special_grid(dt, 1)[0] for dt in dts]
        grids = np.meshgrid(*[np.arange(p.size) for p in pools], indexing="ij")
        return [p[g.ravel()] for p, g in zip(pools, grids)]
    return make


def elementwise_cases(family: str, ops: list[Op]):
    for op in ops:
        for dtype in op.dtypes + op.nightly_dtypes:
            nightly_dtype = dtype in op.nightly_dtypes
            x64 = dtype in X64 or (op.in_dtype is not None and
                                   any(op.in_dtype(i, dtype) in X64 for i in range(op.arity)))
            base = f"{family}/{op.primitive}/{dtype_id(dtype)}"
            common = dict(fn=op.fn, x64=x64, primitives=(op.primitive,), modes=op.mode, dot_bound=op.dot_bound,
                          not_applicable=op.not_applicable)
            if op.specials:
                yield Case(id=f"{base}/specials", inputs=_special_inputs(op, dtype),
                           profile="nightly" if nightly_dtype else op.specials_profile, **common)
            for shape in QUICK_SHAPES + NIGHTLY_SHAPES:
                quick = not nightly_dtype and (shape in QUICK_SHAPES or (
                    shape in QUICK_FIRST_DTYPE_SHAPES and op.quick_shapes and dtype == op.dtypes[0]))
                yield Case(id=f"{base}/{shape_id(shape)}", inputs=_inputs(op, dtype, shape),
                           profile="quick" if quick else "nightly", **common)


# Narrow floats have few enough values to test exhaustively: every value (unary) or every pair
# (binary) of float8 (256 values) and float4 (16 values). float8_e8m0fnu (no zero, no sign) is left to
# the conversion cases.
NARROW = tuple(d for d in D.ML_FLOATS if d.itemsize == 1 and d.name != "float8_e8m0fnu")
NARROW_QUICK = tuple(d for d in NARROW if d.name in ("float8_e4m3fn", "float8_e5m2", "float8_e3m4",
                                                      "float4_e2m1fn"))


def all_values(dtype) -> np.ndarray:
    """Every bit pattern of a one-byte float type (float4 uses the low 4 bits)."""
    n = 16 if "float4" in dtype.name else 256
    return np.arange(n, dtype=np.uint8).view(dtype)


def exhaustive_cases(family: str, ops: list[Op], skip=()):
    """One case per (op, narrow dtype): the op on every value / every pair of values (NARROW_QUICK
    in the quick profile, the other one-byte floats nightly). ``skip``: (primitive, dtype name) pairs."""
    for op in ops:
        for dtype in NARROW:
            if (op.primitive, dtype.name) in skip:
                continue
            profile = "quick" if dtype in NARROW_QUICK else "nightly"
            def make(rng, dtype=dtype, arity=op.arity):
                vals = all_values(dtype)
                grids = np.meshgrid(*([np.arange(vals.size)] * arity), indexing="ij")
                return [vals[g.ravel()] for g in grids]
            yield Case(id=f"{family}/{op.primitive}/{dtype_id(dtype)}/exhaustive", fn=op.fn, inputs=make,
                       primitives=(op.primitive,), modes=op.mode, profile=profile,
                       not_applicable=op.not_applicable)
