"""Reductions: reduce_*, argmax/argmin, reduce_window*, select_and_*, cum*.

Exact results (integers, max/min, argmax, windowed max, bool) are compared bitwise with XLA:CPU.
Float sums/products are compared bitwise with an independent exact oracle (Python Fractions and
a nearest-value search over the dtype's bit patterns), and XLA:CPU is checked against the
reference within the sum error bound K * u * sum|x| (XLA sums in the output type).
"""
from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import interp
from conformance.values import arrays, assert_same_bits as _assert_same_bits
from interp import dtypes as D
from interp.rules.lax_special import correctly_rounded
from tests.support import assert_tree_same_bits, x64, xla_cpu

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

def assert_same_bits(actual, expected, err_msg=""):
    """Bitwise equality (NaN payloads ignored); scalars compared as 1-element arrays."""
    a, e = np.asarray(actual), np.asarray(expected)
    _assert_same_bits(a.reshape(a.shape or (1,)), e.reshape(e.shape or (1,)), err_msg=err_msg)


def ref(fn, *args):
    return interp.interpret(fn)(*args)


# ---------------------------------------------------------------- independent exact oracle

def _ufrac(v) -> Fraction:
    return Fraction(float(np.asarray(v).astype(np.float64)))


_TABLES: dict = {}


def _finite_table(dtype):
    """All finite values of a <= 16-bit float dtype, sorted, as (Fraction, bits) pairs."""
    if dtype not in _TABLES:
        u = D.storage_uint(dtype)
        vals = np.arange(2 ** (8 * dtype.itemsize), dtype=np.uint64).astype(u).view(dtype)
        f = vals.astype(np.float64)
        keep = np.isfinite(f)
        order = np.argsort(f[keep], kind="stable")
        fs, bits = f[keep][order], np.arange(f.size)[keep][order]
        _TABLES[dtype] = ([Fraction(float(x)) for x in fs], bits.tolist())
    return _TABLES[dtype]


def nearest(q: Fraction, dtype) -> np.ndarray:
    """The value of ``dtype`` nearest to the exact rational ``q`` (ties: even last bit), +0 for 0,
    +-inf beyond the overflow threshold (IEEE types). Independent of the reference's rounding."""
    dtype = np.dtype(dtype)
    if q == 0:
        return np.zeros((), dtype)
    fmax = Fraction(float(D.finfo(dtype).max))
    u = D.storage_uint(dtype)
    if dtype.itemsize <= 2:
        fr, bits = _finite_table(dtype)
        import bisect
        i = bisect.bisect_left(fr, q)
        cands = [j for j in (i - 1, i) if 0 <= j < len(fr)]
    else:
        c = np.array(float(q) if abs(q) < 2 ** 1024 else (np.inf if q > 0 else -np.inf)).astype(dtype)
        c = np.where(np.isinf(c), np.array(np.sign(float(c)) * float(D.finfo(dtype).max), dtype), c)
        b = int(c.view(u))
        cands = []
        for d in (-2, -1, 0, 1, 2):
            v = np.array((b + d) % 2 ** (8 * dtype.itemsize), dtype=u).view(dtype)
            if np.isfinite(v.astype(np.float64)):
                cands.append(v)
        cands += [np.zeros((), dtype), np.array(-0.0, dtype)]
        fr = None
    if fr is not None:
        options = [(abs(fr[j] - q), bits[j] & 1, np.array(bits[j], np.uint64).astype(u).view(dtype)) for j in cands]
    else:
        options = [(abs(_ufrac(v) - q), int(v.view(u)) & 1, v) for v in cands]
    best = min(options, key=lambda t: (t[0], t[1]))[2]
    if float(np.asarray(best).astype(np.float64)) == 0:      # underflow keeps the sign of q
        return np.array(-0.0 if q < 0 else 0.0).astype(dtype)
    # Overflow: beyond max + half an ulp of max (ties go to the even neighbour 2**(emax+1)).
    fi = D.finfo(dtype)
    half_ulp = Fraction(2) ** (int(fi.maxexp) - 1 - int(fi.nmant) - 1)
    if abs(q) >= fmax + half_ulp:
        return np.array(np.inf if q > 0 else -np.inf).astype(dtype)
    return np.asarray(best, dtype)


def exact_sum(xs) -> Fraction:
    return sum((_ufrac(v) for v in np.ravel(xs)), Fraction(0))


def special_sum(row) -> np.ndarray:
    """IEEE value of an exact sum with inf/NaN terms: NaN if any NaN or both infinities occur."""
    if np.isnan(row).any() or (np.isposinf(row).any() and np.isneginf(row).any()):
        return np.array(np.nan)
    return np.array(np.inf if np.isposinf(row).any() else -np.inf)


def exact_prod(xs) -> Fraction:
    p = Fraction(1)
    for v in np.ravel(xs):
        p *= _ufrac(v)
    return p


def check_against_oracle(actual: np.ndarray, exact_values: np.ndarray, dtype, what=""):
    for i in np.ndindex(actual.shape):
        assert_same_bits(actual[i], nearest(exact_values[i], dtype), err_msg=f"{what} at {i}")


def sum_bound(xs, dtype) -> float:
    """|XLA - reference| bound for a float sum of K terms computed in ``dtype`` in any order:
    (K + 1) u sum|x| + K * (flushed subnormal size) (XLA:CPU flushes f32/bf16 subnormals)."""
    fi = D.finfo(dtype)
    a = np.abs(np.asarray(xs, np.float64))
    k = a.shape[-1]
    return (k + 1) * float(fi.eps) / 2 * a.sum(-1) + k * float(fi.tiny)


# ---------------------------------------------------------------- reduce_sum

def _sum(x, axes):
    return lax.reduce(x, np.zeros((), x.dtype), lax.add, axes)


FLOATS = [F32, F16, BF16, E4M3, E5M2]


def _sum_rows(x):
    return _sum(x, (1,))


def _cumsum(x):
    return lax.cumsum(x, 1)


def _cumsum_rev(x):
    return lax.cumsum(x, 1, reverse=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@settings(max_examples=12)
@given(data=st.data())
def test_reduce_sum_float_correctly_rounded(dtype, data):
    x = data.draw(arrays(dtype, (3, 11)))
    out = ref(_sum_rows, x)
    xla = xla_cpu(_sum_rows, x)
    for i in range(3):
        row = x[i].astype(np.float64)
        if np.all(np.isfinite(row)):
            assert_same_bits(out[i], nearest(exact_sum(row), dtype), err_msg=f"row {i}: {row}")
            xf, rf = float(xla[i]), float(out[i])
            if np.isfinite(xf) and np.isfinite(rf):
                assert abs(xf - rf) <= sum_bound(row, dtype) + float(D.finfo(dtype).eps) * abs(rf), (row, xf, rf)
        else:
            assert_same_bits(out[i], special_sum(row).astype(dtype), err_msg=f"row {i}: {row}")
            finite = row[np.isfinite(row)]
            if np.abs(finite).sum() <= float(D.finfo(dtype).max) / 2:
                # No partial sum of XLA's can overflow: its inf/NaN placement is the same.
                assert_same_bits(out[i], xla[i], err_msg=f"row {i}: {row}")


def test_reduce_sum_float64_and_axes():
    rng = np.random.default_rng(1)
    with x64():
        x = rng.standard_normal((4, 5, 6)) * correctly_rounded("exp", rng.uniform(-30, 30, (4, 5, 6)))
        out = ref(lambda x: _sum(x, (0, 2)), x)
        check_against_oracle(out, np.array([exact_sum(x[:, j, :]) for j in range(5)], object), F64)


def test_reduce_sum_hard_cases():
    """Ties, cancellation and overflow where float64 summation alone would round wrongly."""
    cases = [
        [1.0, 2 ** -24],                          # tie: to even (1.0)
        [1.0, 2 ** -24, 2 ** -70],                # just above the tie: up
        [1.0, 2 ** -24, -(2 ** -70)],             # just below: down
        [2 ** 60, 1.0, -(2 ** 60), 2 ** -30],     # cancellation
        [3.4e38, 3.4e38, -3.4e38],                # finite exact sum although partial sums overflow f32
        [3.4e38, 3.4e38],                         # overflow to inf
        [1e-45, 1e-45, -1e-45],                   # subnormal kept
        [-0.0, -0.0],                             # +0 (XLA's +0 init value)
    ]
    for c in cases:
        x = np.array(c, np.float32)
        out = ref(lambda x: _sum(x, (0,)), x)
        assert_same_bits(out, nearest(exact_sum(x), F32), err_msg=str(c))
    x = np.array([-0.0, -0.0], np.float32)
    assert_same_bits(ref(lambda x: _sum(x, (0,)), x), xla_cpu(lambda x: _sum(x, (0,)), x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn], ids=lambda d: np.dtype(d).name)
def test_fsum_round_against_fractions(dtype):
    """numerics.fsum_round (the few-elements tier of the float32 dot): exact sums that sit
    on a rounding boundary of ``dtype`` (a midpoint), a hair above or below it (the residual
    math.fsum cannot hold in hi), at a power of two, subnormal, cancelling to zero; against the
    Fraction oracle."""
    from interp.numerics import fsum_round
    rng = np.random.default_rng(7)
    fi = D.finfo(dtype)
    rows = []
    for _ in range(120):
        m = float(np.float64(rng.standard_normal() * 4).astype(dtype))
        step = 2.0 ** (np.frexp(m)[1] - 1 - int(fi.nmant)) if m else float(fi.smallest_subnormal)
        big = rng.standard_normal(6) * 2.0 ** int(rng.integers(0, 40))
        nudge = float(rng.choice([0.0, 2.0 ** -80, -(2.0 ** -80), 2.0 ** -1074, -(2.0 ** -1074)]))
        rows.append([m, step / 2, *big, nudge, *(-big)])                      # midpoint +- a hair
        rows.append([float(2.0 ** int(rng.integers(-20, 20))), -nudge, *big, *(-big), 0.0])
    rows.append([2.0 ** -1074, 2.0 ** -1074, -(2.0 ** -1074)] + [0.0] * 12)  # subnormal
    rows.append([1.5, -1.5] + [0.0] * 13)                                     # exact zero: +0
    terms = np.array(rows)
    got = fsum_round(terms, dtype)
    for row, value in zip(rows, got):
        assert_same_bits(value, nearest(sum(map(Fraction, row), Fraction(0)), dtype), err_msg=str(row))


def test_reduce_sum_complex():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 7)) + 1j * rng.standard_normal((3, 7))).astype(np.complex64)
    out = ref(lambda x: _sum(x, (1,)), x)
    for i in range(3):
        assert_same_bits(out[i].real, nearest(exact_sum(x[i].real), F32))
        assert_same_bits(out[i].imag, nearest(exact_sum(x[i].imag), F32))


# ---------------------------------------------------------------- integer reductions: bitwise vs XLA

INTS = [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32]
MONOIDS = {
    "sum": (lax.add, lambda d: 0), "prod": (lax.mul, lambda d: 1),
    "max": (lax.max, lambda d: D.iinfo(d).min), "min": (lax.min, lambda d: D.iinfo(d).max),
    "and": (lax.bitwise_and, lambda d: -1 if D.is_signed(d) else D.iinfo(d).max),
    "or": (lax.bitwise_or, lambda d: 0), "xor": (lax.bitwise_xor, lambda d: 0),
}


def _int_reducers(dtype):
    fns = []
    for op, init in MONOIDS.values():
        fns.append(lambda x, op=op, init=init: lax.reduce(x, np.array(init(dtype), dtype), op, (1,)))
        fns.append(lambda x, op=op, init=init: lax.reduce(x, np.array(init(dtype), dtype), op, (0, 1)))
    return fns


INT_REDUCERS = {np.dtype(d): _int_reducers(d) for d in INTS}   # fixed functions: XLA compiles once


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@settings(max_examples=8)
@given(data=st.data())
def test_integer_reductions_bitwise(dtype, data):
    x = data.draw(arrays(dtype, (4, 6)))
    for k, fn in enumerate(INT_REDUCERS[np.dtype(dtype)]):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x), err_msg=f"{list(MONOIDS)[k // 2]}")


def test_int64_and_bool_reductions():
    with x64():
        x = np.array([[2 ** 62, 2 ** 62, -5], [-(2 ** 63), -1, 3]], np.int64)
        for name, (op, init) in MONOIDS.items():
            fn = lambda x: lax.reduce(x, np.array(init(np.int64), np.int64), op, (1,))  # noqa: E731
            assert_same_bits(ref(fn, x), xla_cpu(fn, x), err_msg=name)
    b = np.array([[True, False, True], [True, True, True], [False, False, False]])
    for fn in (lambda b: jnp.all(b, 1), lambda b: jnp.any(b, 0), lambda b: lax.reduce(b, False, lax.bitwise_xor, (1,)),
               lambda b: jnp.max(b, 1), lambda b: jnp.min(b, 0)):
        assert_same_bits(ref(fn, b), xla_cpu(fn, b))


# ---------------------------------------------------------------- max/min/argmax: bitwise vs XLA

EXTREMA = [lambda x: jnp.max(x, 1), lambda x: jnp.min(x, 0), lambda x: jnp.max(x),
           lambda x: jnp.argmax(x, 1), lambda x: jnp.argmin(x, 0), lambda x: jnp.argmax(x, 0),
           lambda x: lax.cummax(x, 1), lambda x: lax.cummin(x, 1, reverse=True)]


@pytest.mark.parametrize("dtype", [F32, F16, BF16, E4M3], ids=str)
@settings(max_examples=10)
@given(data=st.data())
def test_max_min_argmax_bitwise(dtype, data):
    # XLA:CPU treats f32/bf16 subnormal inputs as zero (allowance flush-to-zero): flush them
    # first so that both sides see the same values; subnormals are tested on their own below.
    x = flush_subnormals(data.draw(arrays(dtype, (4, 7))))
    for k, fn in enumerate(EXTREMA):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x), err_msg=f"fn {k}: {x!r}")


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """Subnormal f32/bf16/f64 values replaced by zero of the same sign (what XLA:CPU's DAZ does)."""
    if x.dtype not in (F32, BF16, F64):
        return x
    w = x.astype(np.float64)
    tiny = float(D.finfo(x.dtype).tiny)
    with np.errstate(invalid="ignore"):
        sub = (w != 0) & (np.abs(w) < tiny)
    return np.where(sub, np.copysign(0.0, w), w).astype(x.dtype)


def test_max_min_keep_subnormals():
    """The reference never flushes: the largest subnormal is above +0 (XLA:CPU gives 0 here)."""
    x = np.array([[1e-45, 0.0, -1e-45], [-1e-45, -0.0, -2e-45]], np.float32)
    assert_same_bits(ref(lambda x: jnp.max(x, 1), x), np.array([1e-45, -0.0], np.float32))
    assert_same_bits(ref(lambda x: jnp.min(x, 1), x), np.array([-1e-45, -2e-45], np.float32))
    assert ref(lambda x: jnp.argmax(x, 1), x).tolist() == [0, 1]


def test_max_min_edge_cases():
    x = np.array([[np.nan, 1.0, -1.0], [-0.0, 0.0, -0.0], [0.0, -0.0, 0.0], [1.0, 3.0, 3.0],
                  [-np.inf, -np.inf, -np.inf], [2.0, np.nan, np.nan]], np.float32)
    for fn in (lambda x: jnp.max(x, 1), lambda x: jnp.min(x, 1), lambda x: jnp.argmax(x, 1),
               lambda x: jnp.argmin(x, 1), lambda x: lax.cummax(x, 1), lambda x: lax.cummin(x, 0)):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x))
    # max(-0, +0) = +0 and min = -0, NaN wins, ties go to the lowest index (stated in spec/).
    assert np.signbit(ref(lambda x: jnp.max(x, 1), x)[1]) == False  # noqa: E712
    assert np.signbit(ref(lambda x: jnp.min(x, 1), x)[2])
    assert ref(lambda x: jnp.argmax(x, 1), x).tolist() == [0, 0, 0, 1, 0, 1]
    e = np.zeros((0, 3), np.float32)
    assert_same_bits(ref(lambda x: jnp.max(x, 0, initial=-np.inf), e), np.full(3, -np.inf, np.float32))


def test_complex_max_min_lexicographic():
    """XLA orders complex numbers by (real, imaginary); complex64 max/min/cummax/windowed max."""
    rng = np.random.default_rng(13)
    x = (rng.integers(-2, 3, (4, 6)) + 1j * rng.integers(-2, 3, (4, 6))).astype(np.complex64)
    x[0, 0], x[0, 1], x[1, 2] = complex(-0.0, 0.0), complex(0.0, -0.0), complex(np.inf, -1)
    fns = (lambda x: lax.reduce_max_p.bind(x, axes=(1,), **RED_PARAMS),
           lambda x: lax.reduce_min_p.bind(x, axes=(0,), **RED_PARAMS),
           lambda x: lax.cummax(x, 1), lambda x: lax.cummin(x, 0),
           lambda x: lax.reduce_window(x, np.complex64(-np.inf), lax.max, (2, 2), (1, 1), "SAME"))
    for k, fn in enumerate(fns):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x), err_msg=f"fn {k}")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_complex_max_min_bitwise(dtype):
    """Lexicographic max/min with infinities in both parts, bitwise with XLA:CPU: the init value
    -inf+0j / +inf+0j is folded in (it beats -inf-1j), except for one-element reductions."""
    rng = np.random.default_rng(21)
    pool = np.array([0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf])
    fns = (lambda a: jnp.max(a, 1), lambda a: jnp.min(a, 1), lambda a: lax.cummax(a, 1),
           lambda a: lax.cummin(a, 1, reverse=True), lambda a: jnp.max(a, (0, 1), keepdims=True),
           lambda a: lax.reduce_window(a, np.array(-np.inf, dtype), lax.max, (1, 3), (1, 2), "SAME"),
           lambda a: lax.reduce_window(a, np.array(np.inf, dtype), lax.min, (2, 2), (1, 1), "VALID"))
    with x64():
        for n in (1, 5, 40):
            x = np.empty((3, n), dtype)
            x.real, x.imag = rng.choice(pool, (3, n)), rng.choice(pool, (3, n))
            fn = lambda a: tuple(f(a) for f in fns[:6 if n == 1 else 7])  # noqa: E731
            assert_tree_same_bits(ref(fn, x), xla_cpu(fn, x))


def test_complex_extremum_nan_undefined_where_a_nan_can_decide():
    """A NaN that can decide a complex max/min (XLA's result then depends on the reduction order)
    raises; a NaN imaginary part on an element that cannot tie does not, and matches XLA:CPU."""
    x = np.array([[1 + 1j, complex(np.nan, 0), 2 + 0j], [1 + 1j, complex(2, np.nan), 2 + 0j],
                  [complex(0, np.nan), 3 + 1j, -1j]], np.complex64)
    for fn in (lambda a: jnp.max(a, 1), lambda a: lax.cummax(a, 1)):
        with pytest.raises(interp.errors.UndefinedBehaviorError, match="complex_extremum/nan-undefined"):
            ref(fn, x[:2])
    fine = lambda a: (jnp.max(a, 1), jnp.min(a[:, 1:], 1), lax.cummax(a, 1))  # noqa: E731
    assert_tree_same_bits(ref(fine, x[2:]), xla_cpu(fine, x[2:]))
    with pytest.raises(interp.errors.UndefinedBehaviorError):
        ref(lambda a: jnp.min(a, 1), x[2:])


# reduce_max_p's parameters: out_sharding exists on newer JAX only.
RED_PARAMS = {"out_sharding": None} if "out_sharding" in str(
    jax.make_jaxpr(lambda x: jnp.max(x, 0))(np.ones((2,), np.float32))) else {}


# ---------------------------------------------------------------- products

@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@settings(max_examples=8)
@given(data=st.data())
def test_prod_and_cumprod_correctly_rounded(dtype, data):
    x = data.draw(arrays(dtype, (3, 6)))
    prod = ref(lambda x: lax.reduce(x, np.ones((), dtype), lax.mul, (1,)), x)
    cp = ref(lambda x: lax.cumprod(x, 1), x)
    for i in range(3):
        row = x[i].astype(np.float64)
        for k in range(6):
            pre = row[:k + 1]
            want = special_prod(pre)
            if want is None:
                want = nearest(exact_prod(pre), dtype)
            assert_same_bits(cp[i, k], np.asarray(want).astype(dtype), err_msg=str(pre))
        want = special_prod(row)
        assert_same_bits(prod[i], np.asarray(nearest(exact_prod(row), dtype) if want is None else want).astype(dtype))


def special_prod(v):
    """IEEE product when a factor is 0, inf or NaN (None otherwise): sign is the xor of signs."""
    nan, zero, inf = np.isnan(v).any(), (v == 0).any(), np.isinf(v).any()
    if not (nan or zero or inf):
        return None
    sign = -1.0 if np.signbit(v).sum() % 2 else 1.0
    return np.array(np.nan if nan or (zero and inf) else sign * (0.0 if zero else np.inf))


def test_prod_specials_match_xla():
    """Zero signs and inf/NaN of products agree with XLA:CPU where no partial product overflows."""
    x = np.array([[2.0, -0.0, 3.0, -1.0, np.inf], [-np.inf, 0.5, -2.0, np.nan, 1.0],
                  [-0.0, -0.0, -0.0, 4.0, -np.inf], [1.5, -np.inf, -np.inf, 0.25, -3.0]], np.float32)
    for fn in (lambda x: lax.cumprod(x, 1), lambda x: lax.cumprod(x, 1, reverse=True), lambda x: jnp.prod(x, 1)):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x))


def test_prod_wide_exponent_range():
    """Partial products outside float32's range still give the correctly rounded result."""
    x = np.array([1e30, 1e30, 1e-30, 1e-30, 3.0], np.float32)
    assert_same_bits(ref(lambda x: jnp.prod(x), x), nearest(exact_prod(x), F32))
    x = np.array([1e-30, 1e-30, 1e30, 1e25, 7.0], np.float32)
    assert_same_bits(ref(lambda x: jnp.prod(x), x), nearest(exact_prod(x), F32))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_complex_prod_correctly_rounded(dtype):
    """Complex (prefix) products: each part the exact product (Fractions) rounded once; rows with
    cancellation (parts far below the magnitude), wide exponent ranges and exact zero parts."""
    part = F32 if dtype == np.complex64 else F64
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6))).astype(dtype)
    x[1] = np.array([1 + 1j, 1 - 1j, 3 + 4j, 3 - 4j, 1 + 2 ** -20 * 1j, 2j], dtype)   # exact zero parts
    x[2] *= np.array(2.0 ** 100 if dtype == np.complex64 else 2.0 ** 900, part)        # beyond the range
    x[3, ::2] = x[3, 1::2] * (1 + 2.0 ** -10)                                         # near-cancellation
    with x64(dtype == np.complex128):
        prod = ref(lambda x: jnp.prod(x, 1), x)
        cp = ref(lambda x: lax.cumprod(x, 1), x)
    for i in range(4):
        re, im = Fraction(1), Fraction(0)
        for k in range(6):
            a, b = Fraction(float(x[i, k].real)), Fraction(float(x[i, k].imag))
            re, im = re * a - im * b, re * b + im * a
            want = np.array([nearest(re, part), nearest(im, part)])
            got = np.array([cp[i, k].real, cp[i, k].imag])
            assert_same_bits(got, want, err_msg=f"row {i} prefix {k}")
        assert_same_bits(np.array([prod[i].real, prod[i].imag]), want, err_msg=f"row {i}")


# ---------------------------------------------------------------- cumulative

@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@settings(max_examples=8)
@given(data=st.data())
def test_cumsum_correctly_rounded(dtype, reverse, data):
    x = data.draw(arrays(dtype, (2, 9), specials=False).filter(
        lambda a: np.all(np.isfinite(a.astype(np.float64)))))
    fn = _cumsum_rev if reverse else _cumsum
    out, xla = ref(fn, x), xla_cpu(fn, x)
    for i in range(2):
        row = x[i].astype(np.float64)
        for k in range(9):
            part = row[k:] if reverse else row[:k + 1]
            assert_same_bits(out[i, k], nearest(exact_sum(part), dtype), err_msg=str(part))
            if np.isfinite(float(xla[i, k])) and np.isfinite(float(out[i, k])):
                assert abs(float(xla[i, k]) - float(out[i, k])) <= sum_bound(part, dtype) + \
                    float(D.finfo(dtype).eps) * abs(float(out[i, k]))


def test_cumsum_float64_cancellation():
    """float64 prefix sums whose long double bound is too wide: refined (double-double) or exact."""
    rng = np.random.default_rng(12)
    with x64():
        x = rng.standard_normal((2, 40)) * np.ldexp(1.0, rng.integers(-20, 20, (2, 40)))
        x = np.concatenate([x, -x[:, ::-1] * (1 + 2.0 ** -44)], axis=1)
        out = ref(lambda x: lax.cumsum(x, 1), x)
        exact = np.array([[exact_sum(x[i, :k + 1]) for k in range(80)] for i in range(2)], object)
        check_against_oracle(out, exact, F64)


def test_cumulative_integers_bitwise():
    x = np.array([[100, 100, -128, 127, 5], [-1, -1, -1, -1, -1]], np.int8)
    for fn in (lambda x: lax.cumsum(x, 1), lambda x: lax.cumprod(x, 1, reverse=True),
               lambda x: lax.cummax(x, 1), lambda x: lax.cummin(x, 0)):
        assert_same_bits(ref(fn, x), xla_cpu(fn, x))


def test_cumlogsumexp_accuracy():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 200
    x = np.array([[0.5, -3.0, 20.0, -np.inf, 1e-3, 88.0, -100.0]], np.float32)
    out = ref(lambda x: lax.cumlogsumexp(x, 1), x)
    for k in range(x.shape[1]):
        s = mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in x[0, :k + 1] if np.isfinite(v))
        want = nearest(Fraction(mpmath.nstr(mpmath.log(s), 60)), F32)
        assert_same_bits(out[0, k], want, err_msg=f"prefix {k}")
    # XLA:CPU within a few ulps (its scan rounds every step in float32).
    xla = xla_cpu(lambda x: lax.cumlogsumexp(x, 1), x)
    assert np.all(np.abs(xla.view(np.int32).astype(np.int64) - out.view(np.int32)) <= 4)


def _logsumexp_oracle(row, dtype):
    """Every prefix log(sum(exp)) at 2600 bits, rounded once (independent of the reference's
    wide evaluation and its certification)."""
    mpmath = pytest.importorskip("mpmath")
    out = []
    for k in range(len(row)):
        v = [float(a) for a in row[:k + 1]]
        if any(np.isnan(v)) or np.inf in v:
            out.append(np.nan if any(np.isnan(v)) else np.inf)
            continue
        v = [a for a in v if a != -np.inf]
        if not v:
            out.append(-np.inf)
            continue
        with mpmath.workprec(2600):   # exp(2**-1074) = 1 + 2**-1074 needs > 1074 bits
            r = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(a)) for a in v))
            out.append(nearest(_mp_fraction(r), dtype))
    return np.array(out).astype(dtype)


def _mp_fraction(r) -> Fraction:
    sign, man, exp, _ = r._mpf_
    f = Fraction(man) * (Fraction(2) ** exp)
    return -f if sign else f


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=str)
@settings(max_examples=6)
@given(data=st.data())
def test_cumlogsumexp_correctly_rounded(dtype, data):
    x = data.draw(arrays(dtype, (2, 7)))
    with x64(dtype == F64):
        out = ref(lambda x: lax.cumlogsumexp(x, 1, reverse=True), x)
    for i in range(2):
        assert_same_bits(out[i], _logsumexp_oracle(x[i, ::-1], dtype)[::-1], err_msg=str(x[i]))


# ---------------------------------------------------------------- windows

WINDOW_CONFIGS = [
    # window, strides, padding, base_dilation, window_dilation
    ((2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    ((3, 2), (2, 1), ((1, 1), (0, 2)), (1, 1), (1, 1)),
    ((2, 2), (1, 2), ((1, 0), (2, 1)), (2, 1), (1, 1)),
    ((2, 2), (1, 1), ((0, 1), (1, 0)), (1, 1), (2, 2)),
    ((3, 3), (2, 3), ((2, 2), (1, 1)), (2, 3), (1, 2)),
    ((1, 2), (1, 1), ((-1, 0), (0, -1)), (1, 1), (1, 1)),   # negative padding crops
]


def _window_oracle_values(x, pad_value, window, strides, padding, base_dilation, window_dilation):
    """The window contents by direct construction: dilate, pad, then slide (independent of the
    reference's index arithmetic)."""
    d = np.full(tuple((n - 1) * b + 1 for n, b in zip(x.shape, base_dilation)), pad_value, np.float64)
    d[tuple(slice(None, None, b) for b in base_dilation)] = x
    for ax, (lo, hi) in enumerate(padding):
        if lo < 0:
            d = np.take(d, range(-lo, d.shape[ax]), axis=ax)
            lo = 0
        if hi < 0:
            d = np.take(d, range(0, d.shape[ax] + hi), axis=ax)
            hi = 0
        widths = [(0, 0)] * d.ndim
        widths[ax] = (lo, hi)
        d = np.pad(d, widths, constant_values=pad_value)
    ext = [(w - 1) * wd + 1 for w, wd in zip(window, window_dilation)]
    out_shape = [(n - e) // s + 1 for n, e, s in zip(d.shape, ext, strides)]
    res = np.empty(out_shape + [int(np.prod(window))], np.float64)
    for o in np.ndindex(*out_shape):
        sl = tuple(slice(oi * s, oi * s + e, wd) for oi, s, e, wd in zip(o, strides, ext, window_dilation))
        res[o] = d[sl].ravel()
    return res


@pytest.mark.parametrize("config", WINDOW_CONFIGS, ids=lambda c: str(c).replace(" ", ""))
def test_reduce_window_configs(config):
    window, strides, padding, bd, wd = config
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[1, 2], x[3, 3], x[0, 0], x[2, 5] = np.nan, -0.0, np.inf, 0.0
    kw = dict(window_dimensions=window, window_strides=strides, padding=padding,
              base_dilation=bd, window_dilation=wd)
    fmax = lambda x: lax.reduce_window(x, -np.inf, lax.max, **kw)  # noqa: E731
    fmin = lambda x: lax.reduce_window(x, np.inf, lax.min, **kw)  # noqa: E731
    assert_same_bits(ref(fmax, x), xla_cpu(fmax, x))
    assert_same_bits(ref(fmin, x), xla_cpu(fmin, x))
    xi = rng.integers(-100, 100, (5, 7)).astype(np.int32)
    fimax = lambda x: lax.reduce_window(x, np.int32(-2 ** 31), lax.max, **kw)  # noqa: E731
    fisum = lambda x: lax.reduce_window(x, np.int32(0), lax.add, **kw)  # noqa: E731
    assert_same_bits(ref(fimax, xi), xla_cpu(fimax, xi))
    assert_same_bits(ref(fisum, xi), xla_cpu(fisum, xi))
    xs = rng.standard_normal((5, 7)).astype(np.float32) * np.float32(1e3)
    fsum = lambda x: lax.reduce_window(x, np.float32(0), lax.add, **kw)  # noqa: E731
    out = ref(fsum, xs)
    wins = _window_oracle_values(xs, 0.0, window, strides, padding, bd, wd)
    assert out.shape == wins.shape[:-1]
    exact = np.array([exact_sum(w) for w in wins.reshape(-1, wins.shape[-1])], object)
    check_against_oracle(out, exact.reshape(out.shape), F32)
    xla = xla_cpu(fsum, xs)
    assert np.all(np.abs(xla.astype(np.float64) - out) <= sum_bound(wins, F32) + 2 ** -23 * np.abs(out))


def test_generic_reduce_window_and_reduce():
    """Generic reduce / reduce_window (a computation jaxpr): multi-operand max-with-index."""
    x = np.array([[3.0, 1.0, 3.0, np.nan, 2.0, 5.0], [0.0, -1.0, 4.0, 4.0, -2.0, 1.0]], np.float32)
    idx = np.broadcast_to(np.arange(6, dtype=np.int32), x.shape)

    def comp(a, b):
        (av, ai), (bv, bi) = a, b
        take_b = (bv > av) | ((bv == av) & (bi < ai))
        return lax.select(take_b, bv, av), lax.select(take_b, bi, ai)

    fn = lambda x, i: lax.reduce((x, i), (np.float32(-np.inf), np.int32(0)), comp, (1,))  # noqa: E731
    out = ref(fn, x, idx)
    assert_same_bits(out[0], xla_cpu(fn, x, idx)[0])
    assert_same_bits(out[1], xla_cpu(fn, x, idx)[1])
    fw = lambda x, i: lax.reduce_window((x, i), (np.float32(-np.inf), np.int32(0)), comp, (1, 3), (1, 2), "SAME")  # noqa: E731
    got, want = ref(fw, x, idx), xla_cpu(fw, x, idx)
    assert_same_bits(got[0], want[0])
    assert_same_bits(got[1], want[1])
    # A non-monoid scalar computation on one operand: max(a, b) * 1 + 0 through reduce.
    fs = lambda x: lax.reduce(x, np.float32(-np.inf), lambda a, b: lax.max(a, b) * 1.0, (0,))  # noqa: E731
    assert_same_bits(ref(fs, x), xla_cpu(fs, x))


def _pool(x, op, init, window, strides, padding):
    return lax.reduce_window(x, init, op, window, strides, padding)


@pytest.mark.parametrize("window,strides,padding", [
    ((1, 3), (1, 1), ((0, 0), (1, 1))), ((2, 2), (2, 2), ((0, 0), (0, 0))),
    ((2, 3), (1, 2), ((1, 0), (0, 2))), ((3, 3), (1, 1), "SAME")])
def test_max_pool_gradients(window, strides, padding):
    """vjp of max/min pooling (select_and_scatter_add) and jvp (select_and_gather_add), with ties,
    NaN and -0.0. Cotangents are small integers so XLA's float32 sums are exact: bitwise."""
    x = np.array([[1., 3., 3., np.nan, 2., 2., -0., 0.], [5., 5., 5., 1., -1., np.inf, 0., 7.],
                  [2., 1., 4., 4., 4., 0., -np.inf, 3.]], np.float32)
    for op, init in ((lax.max, -np.inf), (lax.min, np.inf)):
        f = lambda x: _pool(x, op, np.float32(init), window, strides, padding)  # noqa: E731
        out_shape = jax.eval_shape(f, x).shape
        g = (np.arange(np.prod(out_shape)) % 7 + 1).astype(np.float32).reshape(out_shape)
        vjp = lambda x, g: jax.vjp(f, x)[1](g)[0]  # noqa: E731
        jvp = lambda x, t: jax.jvp(f, (x,), (t,))[1]  # noqa: E731
        t = (np.arange(x.size) % 5 - 2).astype(np.float32).reshape(x.shape)
        assert_same_bits(ref(vjp, x, g), xla_cpu(vjp, x, g))
        assert_same_bits(ref(jvp, x, t), xla_cpu(jvp, x, t))


def test_generic_select_and_scatter():
    """select_and_scatter with select/scatter computations (JAX's internal _select_and_scatter)."""
    from jax._src.lax.windowed_reductions import _select_and_scatter
    x = np.array([[1., 3., 3., 2., 2., 5., 0., 7.], [5., 5., 5., 1., -1., 4., 0., 7.]], np.float32)
    cases = [(lax.ge, (1, 3), (1, 2), ((0, 0), (0, 0)), lax.mul, 0.5),
             (lax.lt, (2, 3), (1, 2), ((0, 1), (1, 0)), lax.add, 0.0),
             (lax.gt, (1, 2), (1, 1), ((0, 0), (1, 1)), lax.max, -1.0)]
    for select, window, strides, padding, scatter, init in cases:
        shape = jax.eval_shape(lambda x: lax.reduce_window(x, 0.0, lax.add, window, strides, padding), x).shape
        src = (np.arange(np.prod(shape)) % 5 + 1).astype(np.float32).reshape(shape)
        fn = lambda x, s: _select_and_scatter(x, select, window, strides, padding, s, np.float32(init), scatter)  # noqa: E731
        assert_same_bits(ref(fn, x, src), xla_cpu(fn, x, src), err_msg=str((select, window, scatter)))


def test_select_and_scatter_add_sums_correctly_rounded():
    """Overlapping windows scatter several values to one element: the sum is rounded once."""
    x = np.array([[1.0, 9.0, 1.0, 1.0]], np.float32)          # element 1 is every window's max
    f = lambda x: _pool(x, lax.max, np.float32(-np.inf), (1, 2), (1, 1), ((0, 0), (0, 0)))  # noqa: E731
    g = np.array([[1.0, 2 ** -24, 2 ** -24 + 2 ** -47]], np.float32)[:, :jax.eval_shape(f, x).shape[1]]
    out = ref(lambda x, g: jax.vjp(f, x)[1](g)[0], x, g)
    assert_same_bits(out[0, 1], nearest(exact_sum(g[0, :2]), F32))


# ---------------------------------------------------------------- grad / vmap

def test_grad_and_vmap_of_reductions():
    rng = np.random.default_rng(4)
    x = rng.integers(-8, 8, (3, 5)).astype(np.float32)   # small integers: every float sum is exact
    fns = [
        jax.grad(lambda x: jnp.sum(jnp.max(x, axis=1))),
        jax.grad(lambda x: jnp.sum(lax.cummax(x, 1))),
        jax.grad(lambda x: jnp.sum(lax.cumsum(x, 0, reverse=True) * x)),
        jax.vmap(lambda r: (jnp.argmax(r), jnp.min(r), lax.cumsum(r))),
        jax.vmap(lambda r: lax.reduce_window(r, -np.inf, lax.max, (2,), (1,), "SAME"), in_axes=1),
    ]
    for k, fn in enumerate(fns):
        got, want = ref(fn, x), xla_cpu(fn, x)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert_same_bits(g, w, err_msg=f"fn {k}")


def test_select_and_scatter_rejects_a_source_of_the_wrong_shape():
    """One source value per window: JAX's shape rule does not check it, XLA's verifier rejects the
    program, and so does the reference (it used to scatter the surplus into the wrong places)."""
    from jax._src.lax import windowed_reductions as wr
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    f = lambda x, s: wr._select_and_scatter_add(s, x, lax.ge_p, (1, 2), (1, 2), ((0, 0), (0, 0)))  # noqa: E731
    with pytest.raises(Exception, match="source"):
        xla_cpu(f, x, np.ones((5, 4), np.float32))
    with pytest.raises(TypeError, match=r"source shape \(5, 4\) must equal .*\(5, 3\)"):
        interp.interpret(f)(x, np.ones((5, 4), np.float32))
    src = np.arange(15, dtype=np.float32).reshape(5, 3)
    assert_same_bits(interp.interpret(f)(x, src), xla_cpu(f, x, src))
