"""lax elementwise primitives: the reference against XLA:CPU (bitwise) and exact oracles.

Inputs: every pair of values for types of <= 8 bits (exhaustive), every pair of
conformance.values.special_values otherwise, plus hypothesis arrays. XLA:CPU flushes float32,
bfloat16, float64 (and float8_e8m0fnu, computed in float32) subnormals: elements whose inputs or
results are subnormal there are checked against an exact Fraction oracle instead
(spec/lax_elementwise.py, BACKEND_PROPERTIES).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import interp
from conformance.checks import ulp_distance
from conformance.values import arrays, assert_same_bits, bits, normalize_nans, special_values
from interp import dtypes as D
from interp.errors import UndefinedBehaviorError
from tests.support import x64, xla_cpu

import jax._src.lax.lax as _lax_internal

E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
FTZ_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), D.bfloat16)   # XLA:CPU flushes these
SMALL = tuple(d for d in D.ALL if D.bit_width(d) <= 8 and not D.is_bool(d))
INTS = D.SIGNED + D.UNSIGNED
REALS = D.FLOATS
NUM = INTS + REALS
NUM_C = NUM + D.COMPLEX


@pytest.fixture(autouse=True, scope="module")
def _x64():
    with x64(True):
        yield


def ids(dtypes):
    return [np.dtype(d).name for d in dtypes]


# --- inputs and masks ------------------------------------------------------------------------------

def all_values(dtype) -> np.ndarray:
    """Every value of a type of <= 8 bits."""
    dtype = np.dtype(dtype)
    n = D.bit_width(dtype)
    if D.is_float(dtype):
        return np.arange(2 ** n, dtype=np.uint8).view(dtype) if n == 8 else \
            np.arange(2 ** n, dtype=np.uint8).view(dtype)
    info = D.iinfo(dtype)
    return np.arange(int(info.min), int(info.max) + 1).astype(dtype)


def pair_grid(dtype):
    v = all_values(dtype) if dtype in SMALL else special_values(dtype)
    a, b = np.meshgrid(v, v)
    return a.ravel(), b.ravel()


def flushed(x) -> np.ndarray:
    """Elements XLA:CPU would flush: subnormal float32/float64/bfloat16 values (parts of complex),
    and float8_e8m0fnu 2**-127 (a float32 subnormal once upcast)."""
    x = np.asarray(x)
    if D.is_complex(x.dtype):
        return flushed(x.real) | flushed(x.imag)
    if x.dtype == E8M0:
        return x.astype(np.float32) < np.float32(2.0 ** -126)
    if x.dtype not in FTZ_DTYPES:
        return np.zeros(x.shape, bool)
    a = np.abs(x.astype(np.float64))
    return (a > 0) & (a < float(D.finfo(x.dtype).tiny))


def same_bits_mask(a, b) -> np.ndarray:
    a, b = normalize_nans(np.asarray(a)), normalize_nans(np.asarray(b))
    if D.is_complex(a.dtype):
        return same_bits_mask(a.real, b.real) & same_bits_mask(a.imag, b.imag)
    return bits(a) == bits(b)


def check_vs_xla(fn, *args, oracle=None):
    """Reference == XLA:CPU bitwise, except elements XLA:CPU flushes; those == ``oracle`` if given.
    ``fn`` may return a tuple (one compilation for several checks)."""
    refs = interp.interpret(fn)(*args)
    xlas = xla_cpu(fn, *args)
    single = not isinstance(refs, (tuple, list))
    for k, (ref, xla) in enumerate(zip([refs] if single else refs, [xlas] if single else xlas)):
        assert ref.dtype == xla.dtype and ref.shape == xla.shape
        skip = np.zeros(ref.shape, bool)
        for a in (*args, xla, ref):
            if np.shape(a) == ref.shape:
                skip |= flushed(a)
        ok = same_bits_mask(ref, xla) | skip
        bad = np.flatnonzero(~ok.ravel())
        if bad.size:
            i = bad[0]
            raise AssertionError(f"output {k}: {bad.size} elements differ from XLA:CPU; first: args "
                                 f"{[np.ravel(a)[i] for a in args]} ref {ref.ravel()[i]!r} xla {xla.ravel()[i]!r}")
        if oracle is not None and skip.any():
            idx = np.flatnonzero(skip.ravel())
            want = oracle(*[np.ravel(a)[idx] for a in args])
            assert_same_bits(ref.ravel()[idx], want, err_msg="(flushed-on-XLA elements vs exact oracle)")
    return refs


# --- an exact oracle: Fraction -> nearest value of an IEEE type, ties to even --------------------

def round_fraction(v, dtype):
    dtype = np.dtype(dtype)
    fi = D.finfo(dtype)
    if isinstance(v, float):
        return np.array(v).astype(dtype)   # inf / nan
    m = fi.nmant
    emin = int(fi.minexp)
    neg = v < 0
    a = -v if neg else v
    if a == 0:
        return np.array(-0.0 if neg else 0.0).astype(dtype)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, emin) - m)
    n = a / q
    fl = math.floor(n)
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    r = fl * q
    out = math.inf if r > Fraction(float(fi.max)) else float(r)
    return np.array(-out if neg else out).astype(dtype)


def exact(x) -> Fraction | float:
    f = float(np.asarray(x).astype(np.float64))
    return f if not math.isfinite(f) else Fraction(f)


def arith_oracle(op):
    def oracle(x, y):
        out = []
        for a, b in zip(x, y):
            ea, eb = exact(a), exact(b)
            if isinstance(ea, float) or isinstance(eb, float) or (op is Fraction.__truediv__ and eb == 0):
                with np.errstate(all="ignore"):
                    # non-finite operands: IEEE special-value rules (no rounding involved)
                    va = np.asarray(a).astype(np.float64)
                    vb = np.asarray(b).astype(np.float64)
                    out.append(np.asarray({Fraction.__add__: np.add, Fraction.__sub__: np.subtract,
                                           Fraction.__mul__: np.multiply,
                                           Fraction.__truediv__: np.divide}[op](va, vb)).astype(x.dtype))
                continue
            r = op(ea, eb)
            if r == 0:
                sa, sb = np.signbit(np.asarray(a).astype(np.float64)), np.signbit(np.asarray(b).astype(np.float64))
                zsign = {Fraction.__add__: sa and sb, Fraction.__sub__: sa and not sb,
                         Fraction.__mul__: sa != sb, Fraction.__truediv__: sa != sb}[op]
                out.append(np.array(-0.0 if zsign else 0.0).astype(x.dtype))
            else:
                out.append(round_fraction(r, x.dtype))
        return np.array(out, dtype=x.dtype)
    return oracle


# --- binary arithmetic ---------------------------------------------------------------------------

ARITH = {"add": (lax.add, Fraction.__add__), "sub": (lax.sub, Fraction.__sub__),
         "mul": (lax.mul, Fraction.__mul__), "div": (lax.div, Fraction.__truediv__)}


@pytest.mark.parametrize("dtype", INTS + REALS, ids=ids(INTS + REALS))
@pytest.mark.parametrize("name", list(ARITH))
def test_arith_pairs(name, dtype):
    fn, op = ARITH[name]
    x, y = pair_grid(dtype)
    oracle = arith_oracle(op) if dtype in FTZ_DTYPES else None
    check_vs_xla(fn, x, y, oracle=oracle)


@pytest.mark.parametrize("dtype", INTS + REALS, ids=ids(INTS + REALS))
@pytest.mark.parametrize("name", ["rem", "max", "min"])
def test_rem_max_min_pairs(name, dtype):
    fn = {"rem": lax.rem, "max": lax.max, "min": lax.min}[name]
    x, y = pair_grid(dtype)
    check_vs_xla(fn, x, y)


@pytest.mark.parametrize("dtype", D.COMPLEX, ids=ids(D.COMPLEX))
def test_complex_max_min_pairs(dtype):
    # lexicographic (real, imag) as x > y ? x : y; NaN parts make the comparison false
    x, y = pair_grid(dtype)
    check_vs_xla(lax.max, x, y)
    check_vs_xla(lax.min, x, y)
    z = np.array([1 + 5j, np.nan + 0j, 1 + 0j], dtype)
    w = np.array([1 + 2j, 1 + 0j, np.nan + 0j], dtype)
    got = interp.interpret(lax.max)(z, w)
    assert got[0] == 1 + 5j and got[1] == 1 + 0j and np.isnan(got[2].real)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, D.bfloat16, np.float64],
                         ids=ids([np.float16, np.float32, D.bfloat16, np.float64]))
def test_float_arith_correctly_rounded(dtype):
    """Random finite operands (no XLA involved): the reference equals the exact rounding."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200) * 10.0 ** rng.integers(-3, 4, 200)).astype(dtype)
    y = (rng.standard_normal(200) * 10.0 ** rng.integers(-3, 4, 200)).astype(dtype)
    for name, (fn, op) in ARITH.items():
        ref = interp.interpret(lambda a, b: fn(a, b))(x, y)
        assert_same_bits(ref, arith_oracle(op)(x, y), err_msg=name)


WIDE = tuple(d for d in INTS + REALS if d not in SMALL)   # <= 8-bit types are covered exhaustively


@pytest.mark.parametrize("dtype", WIDE, ids=ids(WIDE))
@settings(max_examples=6)
@given(data=st.data())
def test_arith_random_arrays(dtype, data):
    x = data.draw(arrays(dtype, (32,)), label="x")
    y = data.draw(arrays(dtype, (32,)), label="y")
    for fn in (lax.add, lax.sub, lax.mul, lax.div, lax.rem, lax.max, lax.min):
        check_vs_xla(fn, x, y)


@given(x=arrays(np.float32, (16,)), y=arrays(np.float32, (16,)))
@settings(max_examples=15)
def test_float32_hypothesis_vs_oracle(x, y):
    for name, (fn, op) in ARITH.items():
        check_vs_xla(fn, x, y, oracle=arith_oracle(op))


def test_integer_division_edge_cases():
    """XLA semantics, also as hand-written values (numerics.md): x/0 == -1, x%0 == x,
    INT_MIN/-1 == INT_MIN, INT_MIN%-1 == 0; unsigned x/0 == all ones."""
    x = np.array([7, -7, np.iinfo(np.int32).min, np.iinfo(np.int32).min, 7, -7], np.int32)
    y = np.array([0, 0, -1, 0, -2, 2], np.int32)
    q = interp.interpret(lax.div)(x, y)
    r = interp.interpret(lax.rem)(x, y)
    np.testing.assert_array_equal(q, [-1, -1, np.iinfo(np.int32).min, -1, -3, -3])
    np.testing.assert_array_equal(r, [7, -7, 0, np.iinfo(np.int32).min, 1, -1])
    np.testing.assert_array_equal(q, xla_cpu(lax.div, x, y))
    np.testing.assert_array_equal(r, xla_cpu(lax.rem, x, y))
    u = np.array([7, 0], np.uint32)
    np.testing.assert_array_equal(interp.interpret(lax.div)(u, np.zeros(2, np.uint32)), [2 ** 32 - 1] * 2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=ids([np.float16, np.float32, np.float64]))
def test_max_min_zero_fixup_large_arrays(dtype):
    """The native max/min path (NumPy's SIMD loops, then a fix-up only where a -0.0 max / +0.0
    min came out): equal zeros of both signs at every position of long, strided and broadcast
    operands, among NaNs and ordinary values; bitwise against XLA:CPU."""
    rng = np.random.default_rng(5)
    pool = np.array([0.0, -0.0, 1.5, -2.0, np.nan, -np.inf], dtype)
    x = pool[rng.integers(0, 6, 1031)]
    y = pool[rng.integers(0, 6, 1031)]
    for fn in (lax.max, lax.min):
        check_vs_xla(fn, x, y)
        check_vs_xla(fn, x[::3], y[1::3])
        check_vs_xla(fn, x, dtype(-0.0))
        check_vs_xla(fn, dtype(0.0), y)
        check_vs_xla(fn, x[:1000].reshape(40, 25), -y[:1000].reshape(40, 25))
        check_vs_xla(fn, np.full(64, -0.0, dtype), np.zeros(64, dtype))   # no element ordered
        check_vs_xla(fn, np.abs(x[np.isfinite(x) & (x != 0)]) + 1, np.ones(1, dtype))   # no zero
        for a in pool:                      # rank 0: the scalar path (checks zero results only)
            for b in pool:
                check_vs_xla(fn, a, b)


def test_max_min_signed_zero_and_nan():
    x = np.array([-0.0, 0.0, np.nan, 1.0, np.nan], np.float32)
    y = np.array([0.0, -0.0, 1.0, np.nan, np.nan], np.float32)
    mx = interp.interpret(lax.max)(x, y)
    mn = interp.interpret(lax.min)(x, y)
    assert not np.signbit(mx[0]) and not np.signbit(mx[1])
    assert np.signbit(mn[0]) and np.signbit(mn[1])
    assert np.isnan(mx[2:]).all() and np.isnan(mn[2:]).all()


# --- unary -------------------------------------------------------------------------------------------

def values(dtype):
    return all_values(dtype) if dtype in SMALL else special_values(dtype)


UNARY = {
    "neg": (lax.neg, NUM), "sign": (lax.sign, NUM), "abs": (lax.abs, D.SIGNED[len(D.ML_INTS):] + REALS),
    "square": (lax.square, NUM), "floor": (lax.floor, REALS), "ceil": (lax.ceil, REALS),
    "round_away": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), REALS),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), REALS),
    "is_finite": (lax.is_finite, REALS), "not": (lax.bitwise_not, INTS + (D.BOOL,)),
    "population_count": (lax.population_count, INTS), "clz": (lax.clz, INTS),
}
UNARY_CASES = [(n, d) for n, (_, ds) in UNARY.items() for d in ds]


@pytest.mark.parametrize("name,dtype", UNARY_CASES, ids=[f"{n}-{np.dtype(d).name}" for n, d in UNARY_CASES])
def test_unary(name, dtype):
    fn = UNARY[name][0]
    x = values(dtype)
    if name == "population_count" and dtype in D.ML_INTS:
        # XLA:CPU counts the bits of the sign-extended storage byte for int2/int4
        # (popcount(int4 -8) == 5); the reference counts the element's own bits
        # (spec/lax_elementwise.py BACKEND_PROPERTIES); checked against Python instead.
        n = D.bit_width(dtype)
        want = [bin(int(v) & ((1 << n) - 1)).count("1") for v in x]
        want = [w - (1 << n) if w >= 1 << (n - 1) else w for w in want]   # wraps into the type
        np.testing.assert_array_equal(interp.interpret(fn)(x).astype(int), want)
        return
    check_vs_xla(fn, x)


def test_round_methods_by_hand():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 2.0 ** 23 + 1], np.float32)
    away = interp.interpret(lambda v: lax.round(v, lax.RoundingMethod.AWAY_FROM_ZERO))(x)
    even = interp.interpret(lambda v: lax.round(v, lax.RoundingMethod.TO_NEAREST_EVEN))(x)
    np.testing.assert_array_equal(away, [1, 2, 3, -1, -3, 0, 0, 2.0 ** 23 + 1])
    np.testing.assert_array_equal(even, [0, 2, 2, -0.0, -2, 0, 0, 2.0 ** 23 + 1])
    assert np.signbit(away[6]) and np.signbit(even[3])


def test_unsigned_abs_rejected_like_jax():
    with pytest.raises(TypeError):
        interp.interpret(lax.abs)(np.array([1], np.uint8))


POWERS = (-3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 10)


@pytest.mark.parametrize("dtype", NUM, ids=ids(NUM))
def test_integer_pow(dtype):
    x = values(dtype)
    powers = [y for y in POWERS if y >= 0 or not D.is_int(dtype)]
    if dtype != E8M0:
        check_vs_xla(lambda a: tuple(lax.integer_pow(a, y) for y in powers), x)
        return
    for y in powers:
        v = x
        if dtype == E8M0:
            # XLA:CPU computes e8m0fnu in float32 and flushes intermediate powers below 2**-126;
            # keep inputs whose powers up to x**|y| stay normal (checked exactly below)
            with np.errstate(all="ignore"):
                p = x.astype(np.float64) ** max(abs(y), 1)
            v = x[(p >= 2.0 ** -126) & (p <= 2.0 ** 127) | np.isnan(p)]
        check_vs_xla(lambda a: lax.integer_pow(a, y), v)
    if dtype == E8M0:
        # every power of two of e8m0fnu: x**y is exact while in range
        k = np.arange(-20, 21)
        x = np.array(2.0 ** k).astype(E8M0)
        for y in (2, 3, 5, -1, -3):
            want = np.array(2.0 ** (k * y)).astype(np.float32).astype(E8M0)
            assert_same_bits(interp.interpret(lambda a: lax.integer_pow(a, y))(x), want)


def test_integer_pow_rounds_every_product():
    # bf16: x**4 is (x*x)*(x*x) with each product rounded to bf16, not exp(4 log x)
    x = np.array([1.0078125], D.bfloat16)   # 1 + 2**-7
    sq = (np.float64(1.0078125) ** 2)
    sq_b = np.array(sq).astype(D.bfloat16).astype(np.float64)
    want = np.array(sq_b * sq_b).astype(D.bfloat16)
    assert_same_bits(interp.interpret(lambda v: lax.integer_pow(v, 4))(x), np.array([want]))


# --- comparisons, total order, bitwise, shifts ------------------------------------------------------

CMPS = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}
TOTAL = {"eq_to": _lax_internal.eq_to_p.bind, "le_to": _lax_internal.le_to_p.bind,
         "lt_to": _lax_internal.lt_to_p.bind}


@pytest.mark.parametrize("dtype", (D.BOOL,) + NUM_C, ids=ids((D.BOOL,) + NUM_C))
def test_comparisons(dtype):
    if D.is_bool(dtype):
        x, y = np.array([False, False, True, True]), np.array([False, True, False, True])
    else:
        x, y = pair_grid(dtype)
    fns = [CMPS["eq"], CMPS["ne"]] if D.is_complex(dtype) else list(CMPS.values()) + list(TOTAL.values())
    check_vs_xla(lambda a, b: tuple(f(a, b) for f in fns), x, y)


NATIVE_CMP = (D.BOOL,) + tuple(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128))


@pytest.mark.parametrize("dtype", NATIVE_CMP, ids=ids(NATIVE_CMP))
def test_scalar_comparisons(dtype):
    """Rank-0 operands (the plan's Python-operator fast path on NumPy scalars), variable and literal
    (a constant held in the operand dtype), against XLA:CPU: NaN, -0.0, infinities, extremes."""
    if D.is_bool(dtype):
        vals = [np.bool_(False), np.bool_(True)]
    elif D.is_int(dtype):
        vals = list(special_values(dtype))
    else:
        big = float(np.finfo(dtype).max)
        reals = [np.nan, -np.inf, -big, -1.0, -0.0, 0.0, float(np.finfo(dtype).smallest_subnormal),
                 1.0, big, np.inf]
        vals = list(np.array(reals).astype(dtype))
        if D.is_complex(dtype):
            vals = [dtype.type(complex(r, i)) for r, i in zip(reals, reals[3:] + reals[:3])]
    fns = [CMPS["eq"], CMPS["ne"]] if D.is_complex(dtype) else list(CMPS.values())

    def both(a, b):
        return tuple(f(a, b) for f in fns)
    for a in vals:
        for b in vals:
            refs = check_vs_xla(both, a, b)
            assert all(np.shape(r) == () and r.dtype == np.bool_ for r in refs)
    consts = [c for c in vals if not flushed(c)]       # (XLA:CPU flushes a subnormal literal)
    for c in (consts[0], consts[len(consts) // 2], consts[-1]):
        def lit(a, c=c):
            return tuple(f(a, c) for f in fns) + tuple(f(c, a) for f in fns)
        for a in vals:
            check_vs_xla(lit, a)


def test_total_order_by_hand():
    x = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan], np.float32)
    lt = interp.interpret(lambda a, b: _lax_internal.lt_to_p.bind(a, b))(x[:-1], x[1:])
    assert lt.all()
    eq = interp.interpret(lambda a, b: _lax_internal.eq_to_p.bind(a, b))(x, x)
    assert eq.all()


BITWISE = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
           "shift_left": lax.shift_left, "shift_right_arithmetic": lax.shift_right_arithmetic,
           "shift_right_logical": lax.shift_right_logical, "mulhi": lax.mulhi}


@pytest.mark.parametrize("dtype", INTS + (D.BOOL,), ids=ids(INTS + (D.BOOL,)))
def test_bitwise_and_shifts(dtype):
    if D.is_bool(dtype):
        x, y = np.array([False, False, True, True]), np.array([False, True, False, True])
        for name in ("and", "or", "xor"):
            check_vs_xla(lambda a, b: BITWISE[name](a, b), x, y)
        return
    x, y = pair_grid(dtype)
    if dtype not in SMALL:
        # shift amounts around the bit width, negative ones included
        n = D.bit_width(dtype)
        amounts = np.array([0, 1, n - 1, n, n + 1, 2 * n] + ([-1] if D.is_signed(dtype) else []))
        x2, y2 = np.meshgrid(special_values(dtype), amounts.astype(dtype))
        x, y = np.concatenate([x, x2.ravel()]), np.concatenate([y, y2.ravel()])
    # (XLA:CPU's int2/int4 mulhi is wrong: see test_mulhi_by_hand)
    fns = [fn for name, fn in BITWISE.items() if not (name == "mulhi" and dtype in D.ML_INTS + D.ML_UINTS)]
    check_vs_xla(lambda a, b: tuple(f(a, b) for f in fns), x, y)


def test_mulhi_by_hand():
    for dtype in D.ML_INTS + D.ML_UINTS + (np.dtype(np.int64), np.dtype(np.uint64)):
        x, y = pair_grid(dtype) if dtype in SMALL else np.meshgrid(special_values(dtype), special_values(dtype))
        x, y = np.ravel(x), np.ravel(y)
        n = D.bit_width(dtype)
        want = [(int(a) * int(b)) >> n for a, b in zip(x, y)]
        got = interp.interpret(lax.mulhi)(x, y)
        np.testing.assert_array_equal([int(v) for v in got], [w - (1 << n) * (w >= 1 << (n - 1))
                                                              if D.is_signed(dtype) else w % (1 << n)
                                                              for w in want])


def test_shift_edge_cases_by_hand():
    x = np.array([-8, -8, 5, 5, -1], np.int32)
    s = np.array([32, 40, 32, -1, 31], np.int32)
    np.testing.assert_array_equal(interp.interpret(lax.shift_right_arithmetic)(x, s), [-1, -1, 0, 0, -1])
    np.testing.assert_array_equal(interp.interpret(lax.shift_right_logical)(x, s), [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(interp.interpret(lax.shift_left)(x, s), [0, 0, 0, 0, -(2 ** 31)])


# --- nextafter, clamp, select_n, complex parts -------------------------------------------------------

NEXTAFTER_DTYPES = tuple(d for d in REALS if d != E8M0)


@pytest.mark.parametrize("dtype", NEXTAFTER_DTYPES, ids=ids(NEXTAFTER_DTYPES))
def test_nextafter(dtype):
    x, y = pair_grid(dtype)
    check_vs_xla(lax.nextafter, x, y)


def test_nextafter_subnormals_by_hand():
    tiny = np.float32(2.0 ** -149)
    x = np.array([0.0, -0.0, tiny, -tiny, 0.0, 2.0 ** -126], np.float32)
    y = np.array([1.0, -1.0, 0.0, 0.0, -0.0, 0.0], np.float32)
    got = interp.interpret(lax.nextafter)(x, y)
    want = np.array([tiny, -tiny, 0.0, -0.0, -0.0, np.float32(2.0 ** -126) - tiny], np.float32)
    assert_same_bits(got, want)


def test_nextafter_e8m0_every_pair():
    """float8_e8m0fnu: all 256 x 256 pairs bitwise equal to XLA:CPU (no element skipped: chlo's
    expansion only compares the values, and 2**-127 compares equal only to itself flushed or not).
    By hand: the top bit acts as chlo's sign bit, so 0x00 (2**-127) and 0x80 (2**1) are its zeros."""
    v = np.arange(256, dtype=np.uint8).view(E8M0)
    x, y = np.repeat(v, 256), np.tile(v, 256)
    got = interp.interpret(lax.nextafter)(x, y)
    assert_same_bits(got, xla_cpu(lax.nextafter, x, y))
    pairs = {(0x01, 0x02): 0x02, (0x02, 0x01): 0x01, (0x7F, 0x01): 0x7E, (0x01, 0x80): 0x00,
             (0x00, 0x05): 0x01, (0x80, 0x05): 0x01, (0x00, 0x85): 0x81, (0x80, 0x00): 0x00,
             (0xFE, 0x01): 0xFD, (0x81, 0x90): 0x82, (0x30, 0x30): 0x30, (0x30, 0xFF): 0xFF,
             (0xFF, 0x30): 0xFF}
    for (a, b), want in pairs.items():
        r = got.view(np.uint8)[a * 256 + b]
        assert r == want, f"nextafter bits {a:#x} -> {b:#x}: {r:#x}, want {want:#x}"


@pytest.mark.parametrize("dtype", INTS + REALS, ids=ids(INTS + REALS))
def test_clamp(dtype):
    v = values(dtype)[:24]
    lo, x, hi = (a.ravel() for a in np.meshgrid(v[:8], v, v[-8:]))
    check_vs_xla(lax.clamp, lo, x, hi)
    # scalar bounds: compared with XLA:CPU given the same bounds as arrays (XLA:CPU mis-compares an
    # int2 scalar constant: spec/lax_elementwise.py BACKEND_PROPERTIES int2-scalar-constant-compare)
    ref = interp.interpret(lambda a: lax.clamp(v[1], a, v[-2]))(v)
    assert_same_bits(ref, xla_cpu(lax.clamp, np.full_like(v, v[1]), v, np.full_like(v, v[-2])))


def test_clamp_min_above_max():
    assert interp.interpret(lax.clamp)(np.int32(3), np.int32(2), np.int32(1)) == 1


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.float32, D.bfloat16, np.complex64, ml_dtypes.int4],
                         ids=ids([np.bool_, np.int32, np.float32, D.bfloat16, np.complex64, ml_dtypes.int4]))
def test_select_n(dtype):
    dtype = np.dtype(dtype)
    v = values(dtype) if not D.is_bool(dtype) else np.array([False, True])
    cases = [np.resize(np.roll(v, k), 12).astype(dtype) for k in range(3)]
    pred = np.array([True, False] * 6)
    check_vs_xla(lambda p, a, b: lax.select_n(p, a, b), pred, cases[0], cases[1])
    which = np.array([0, 1, 2, 2, 1, 0] * 2, np.int32)
    check_vs_xla(lambda w, a, b, c: lax.select_n(w, a, b, c), which, *cases)
    check_vs_xla(lambda a, b: lax.select_n(True, a, b), cases[0], cases[1])   # scalar predicate


def test_select_n_c2_out_of_range_is_loud():
    with pytest.raises(UndefinedBehaviorError, match="select_n/c2"):
        interp.interpret(lambda w, a, b: lax.select_n(w, a, b))(np.array([2], np.int32), np.ones(1), np.ones(1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_complex_parts(dtype):
    x, y = pair_grid(dtype)
    z = check_vs_xla(lax.complex, x, y)
    check_vs_xla(lax.real, z)
    check_vs_xla(lax.imag, z)
    check_vs_xla(lax.conj, z)
    check_vs_xla(lax.conj, x)          # real input: complex(x, +0)
    check_vs_xla(lax.neg, z)
    check_vs_xla(lax.add, z, z[::-1])
    check_vs_xla(lax.sub, z, z[::-1])


@pytest.mark.parametrize("dtype", D.COMPLEX, ids=ids(D.COMPLEX))
def test_complex_arithmetic_within_budget(dtype):
    """Complex mul/div/abs/sign/integer_pow: the reference rounds each part of the textbook
    formula once (spec: CONVENTION); XLA:CPU rounds every product, so on finite, moderately
    scaled inputs both agree within the ULP budget stated in spec/lax_elementwise.py."""
    from spec.lax_elementwise import COMPLEX_ULP_BUDGET
    rng = np.random.default_rng(3)
    part = D.finfo(np.float32 if dtype == np.complex64 else np.float64)
    n = 400
    z = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))) * 10.0 ** rng.integers(-3, 4, (2, n))
    x, y = z.astype(dtype)
    for fn in (lax.mul, lax.div):
        ref, xla = interp.interpret(fn)(x, y), xla_cpu(fn, x, y)
        for p in (np.real, np.imag):
            r, q = p(ref), p(xla)
            # parts that cancel to far below the operands' scale carry only absolute accuracy
            scale = np.abs(x) * np.abs(y) if fn is lax.mul else np.abs(x) / np.abs(y)
            # (XLA:CPU's product roundings are <= 1 ulp of the scale each)
            big = np.abs(r) >= scale / 4
            assert (ulp_distance(r[big], q[big]) <= COMPLEX_ULP_BUDGET).all()
            assert (np.abs(r - q)[~big] <= 4 * scale[~big] * float(part.eps)).all()
    for fn in (lax.abs, lax.sign, lambda v: lax.integer_pow(v, 3)):
        ref, xla = interp.interpret(fn)(x), xla_cpu(fn, x)
        err = np.abs(ref - xla) / np.maximum(np.abs(xla), float(part.tiny))
        assert (err <= 4 * float(part.eps)).all()


def test_complex_mul_correctly_rounded_complex64():
    # (-0.1+3j)(0.1+2**-23 j): imag = -0.1f*2**-23 + 3*0.1f = 0.29999999254..., nearest f32 is
    # 0.29999998 (XLA:CPU, rounding the product 3*0.1f first, gives 0.3)
    x = np.array([-0.1 + 3j], np.complex64)
    y = np.array([0.1 + 2.0 ** -23 * 1j], np.complex64)
    got = interp.interpret(lax.mul)(x, y)
    a, b = Fraction(float(np.float32(-0.1))), Fraction(3)
    c, d = Fraction(float(np.float32(0.1))), Fraction(2) ** -23
    assert_same_bits(got.imag, np.array([round_fraction(a * d + b * c, np.float32)]))
    assert_same_bits(got.real, np.array([round_fraction(a * c - b * d, np.float32)]))


# --- mul(out_dtype), broadcasting, weak types and x64 off ---------------------------------------

def test_mul_out_dtype():
    x = np.array([1, 2, 300], np.int32)
    y = np.array([3, 4, 5], np.int32)
    fn = lambda a, b: lax.mul(a, b, out_dtype=jnp.float32)   # noqa: E731
    check_vs_xla(fn, x, y)


def test_scalar_broadcast_and_weak_types_x64_off():
    with x64(False):
        fns = [lambda a: a * 3 + 1.5, lambda a: lax.div(a, 7), lambda a: (a << 3) ^ -1,
               lambda a: jnp.maximum(a, 2) - jnp.minimum(a, -2.5)]
        for dtype in (np.int32, np.float32, np.float16, D.bfloat16, np.int8, np.uint8):
            x = special_values(dtype)
            for fn in fns:
                try:
                    jax.eval_shape(fn, x)
                except TypeError:
                    continue
                out = check_vs_xla(fn, x)
                assert out.dtype == jax.eval_shape(fn, x).dtype


# --- transformations produce ordinary primitives -------------------------------------------------

def xla_eager(fn, *args):
    """``fn`` run op by op on XLA:CPU (no jit, so no fusion and no FMA contraction across ops)."""
    with jax.default_device(jax.devices("cpu")[0]), jax.disable_jit():
        return jax.tree_util.tree_map(np.asarray, fn(*args))


def test_grad_vmap_jvp():
    def f(x, y):   # scalar function of scalars; vmap(grad) gives elementwise programs
        return jnp.where(x > 0, x * y, jnp.abs(y) ** 3) / (1.0 + x * x) + jnp.maximum(x, y)

    x = np.linspace(-2, 2, 9).astype(np.float32)
    y = np.linspace(1, -3, 9).astype(np.float32)
    vm = jax.vmap(lambda a, b: jnp.clip(a * b, -1.0, 1.0) + lax.sign(a) * lax.round(b))
    jv = lambda a, t: jax.jvp(lambda v: lax.integer_pow(v, 3) - lax.rem(v, np.float32(0.75)), (a,), (t,))   # noqa: E731
    for fn, args in ((jax.vmap(jax.grad(f, argnums=(0, 1))), (x, y)), (vm, (x.reshape(3, 3), y.reshape(3, 3))),
                     (jv, (x, y))):
        ref = interp.interpret(fn)(*args)
        want = xla_eager(fn, *args)
        for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(want)):
            assert_same_bits(a, b)


def test_scalar_operands_keep_shape():
    """0-d operands give 0-d results on every path (bit views, round-to-odd, total order)."""
    c = np.complex64(1 + 2j)
    assert interp.interpret(lax.mul)(c, c).shape == ()
    b = np.array(1.5, D.bfloat16)
    assert interp.interpret(lax.nextafter)(b, b).shape == ()
    assert interp.interpret(lambda a, b: _lax_internal.lt_to_p.bind(a, b))(np.float32(1), np.float32(2)).shape == ()
    assert interp.interpret(lax.real)(c).shape == () and interp.interpret(lax.add)(b, b).shape == ()


@pytest.mark.parametrize("dtype", D.COMPLEX, ids=ids(D.COMPLEX))
def test_complex_clamp(dtype):
    """Complex clamp is the spec's minimum(maximum(x, lo), hi): bitwise equal to XLA:CPU's own
    lax.max and lax.min composed. XLA:CPU's fused clamp compares real parts only
    (spec/lax_elementwise.py BACKEND_PROPERTIES complex-clamp): checked against that model so a
    change on either side is seen."""
    parts = [0.0, 1.0, 2.0, -0.0, np.inf, np.nan]
    v = np.array([complex(a, b) for a in parts for b in parts[:3] + [np.nan]], dtype)
    lo, x, hi = (a.ravel() for a in np.meshgrid(v[::3], v, v[1::3]))
    ref = interp.interpret(lax.clamp)(lo, x, hi)
    assert_same_bits(ref, xla_cpu(lambda l, a, h: lax.min(lax.max(a, l), h), lo, x, hi))
    assert_same_bits(interp.interpret(lax.clamp)(dtype.type(1j), v, dtype.type(2 + 1j)),
                     xla_cpu(lambda a: lax.min(lax.max(a, dtype.type(1j)), dtype.type(2 + 1j)), v))
    # by hand: lexicographic, unlike XLA:CPU's clamp
    got = interp.interpret(lax.clamp)(dtype.type(0), np.array([1j, -1j, 3 + 0j, 1 + 5j], dtype), dtype.type(1 + 1j))
    assert_same_bits(got, np.array([1j, 0, 1 + 1j, 1 + 1j], dtype))
    m = np.where(lo.real >= x.real, lo, x)
    xla_model = np.where(m.real <= hi.real, m, hi)
    assert_same_bits(xla_cpu(lax.clamp, lo, x, hi), xla_model)


@pytest.mark.parametrize("dtype", D.COMPLEX, ids=ids(D.COMPLEX))
def test_complex_eq_to(dtype):
    """eq_to on complex operands: total-order equality of both parts (StableHLO compare with
    TOTALORDER, lexicographic on (real, imag)); real operands bitwise as XLA:CPU. XLA:CPU's complex
    eq_to is IEEE equality (spec/lax_elementwise.py BACKEND_PROPERTIES complex-total-order-eq):
    checked against that model."""
    from jax._src.lax.lax import eq_to_p
    parts = np.array([0.0, -0.0, 1.0, np.nan, np.inf])
    v = np.array([complex(a, b) for a in parts for b in parts], dtype)
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    eq_to = lambda a, b: eq_to_p.bind(a, b)  # noqa: E731
    got = interp.interpret(eq_to)(x, y)
    fdt = np.float32 if dtype == np.complex64 else np.float64
    same = lambda a, b: bits(np.array(a, fdt)) == bits(np.array(b, fdt))  # noqa: E731
    want = np.array([same(a.real, b.real) and same(a.imag, b.imag) for a, b in zip(x, y)])
    assert_same_bits(got, want)
    try:
        xla = xla_cpu(eq_to, x, y)
    except jax.errors.JaxRuntimeError as e:   # jaxlib 0.10.2: its HLO verifier refuses it
        assert "Expected comparison type FLOAT" in str(e)
    else:
        assert_same_bits(xla, x == y)
    assert_same_bits(interp.interpret(eq_to)(x.real.copy(), y.real.copy()), xla_cpu(eq_to, x.real.copy(), y.real.copy()))


@pytest.mark.parametrize("name", ["le_to", "lt_to"])
def test_total_order_complex_lexicographic_only_eq_to_takes_complex(name):
    # JAX's dtype rule refuses complex le_to / lt_to: a traced eq_to is re-bound as one.
    x = np.array([1 + 2j, np.nan], np.complex64)
    closed = jax.make_jaxpr(lambda a, b: _lax_internal.eq_to_p.bind(a, b))(x, x)
    eqn = closed.jaxpr.eqns[0]
    other = eqn.replace(primitive=getattr(_lax_internal, f"{name}_p"))
    with pytest.raises(interp.UnsupportedPrimitiveError,
                       match=f"total_order/complex-lexicographic: {name} of complex operands"):
        interp.eval_jaxpr(closed.replace(jaxpr=closed.jaxpr.replace(eqns=[other])), x, x)


def test_native_plan_choice_arithmetic_and_comparisons():
    """Plan-time specialisation (one _native step for both): the NumPy ufunc rule where the operands
    share one native dtype and the result has it (arithmetic) or is bool (comparisons; complex
    only for eq/ne); the general rule otherwise (narrow floats, mixed dtypes, mul's out_dtype)."""
    from types import SimpleNamespace

    from interp.registry import RULES
    f32, f64, c64, bf16, b = (np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                                     ml_dtypes.bfloat16, np.bool_))

    def planned(name, ins, out, **params):
        ctx = SimpleNamespace(in_avals=[jax.core.ShapedArray((3,), d) for d in ins], out_dtype=out,
                              params=params, eqn=None)
        rule = RULES[name]
        got = rule.prepare(ctx)
        return "native" if got is not rule else "general"
    cases = [("add", (f32, f32), f32, {}, "native"), ("add", (bf16, bf16), bf16, {}, "general"),
             ("mul", (f32, f32), f32, {"out_dtype": f64}, "general"),
             ("lt", (f32, f32), b, {}, "native"), ("lt", (f64, f64), b, {}, "native"),
             ("eq", (b, b), b, {}, "native"), ("lt", (bf16, bf16), b, {}, "general"),
             ("eq", (c64, c64), b, {}, "native"), ("lt", (c64, c64), b, {}, "general"),
             ("eq", (f32, f64), b, {}, "general"), ("eq", (f32, f32), f32, {}, "general")]
    assert [planned(n, i, o, **p) for n, i, o, p, _ in cases] == [want for *_, want in cases]


# --- the rank-0 integer fast path (Python ints at plan time) -------------------------------------

RANK0_BINARY = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
                "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
                "max": lax.max, "min": lax.min, "eq": lax.eq, "ne": lax.ne, "lt": lax.lt,
                "le": lax.le, "gt": lax.gt, "ge": lax.ge, "shift_left": lax.shift_left,
                "shift_right_logical": lax.shift_right_logical,
                "shift_right_arithmetic": lax.shift_right_arithmetic}
RANK0_UNARY = {"neg": lax.neg, "not": lax.bitwise_not, "sign": lax.sign, "abs": lax.abs}
RANK0_BOOL = ("and", "or", "xor", "max", "min", "eq", "ne", "lt", "le", "gt", "ge", "not")
RANK0_DTYPES = tuple(np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int16, np.int32,
                                            np.uint32, np.int64, np.uint64))


def rank0_values(dtype) -> np.ndarray:
    """Every value of bool and int8; else the edge values, small numbers, shift amounts around
    the bit width and seeded random values."""
    if dtype == np.bool_:
        return np.array([False, True])
    if dtype == np.int8:
        return all_values(dtype)
    n = D.bit_width(dtype)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(n)
    small = [v for v in range(-9, 10) if info.min <= v]
    return np.unique(np.concatenate([
        special_values(dtype), np.array(small + [n - 1, n, n + 1, 2 * n]).astype(dtype),
        rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True)]))


def _rank0_step(fn, *operands):
    """(the planned rule, its EqnContext) of ``fn``'s one equation on rank-0 ``operands``."""
    from interp.evaluator import get_closed_plan
    from interp.options import make_options
    closed = jax.make_jaxpr(fn)(*operands)
    (step,) = get_closed_plan(closed, make_options(None))[0].steps
    return step[0], step[1]


def _general(fn, name, *arrays):
    """The registered (general) rule of ``name`` on whole arrays (``fn``'s one equation, on the
    arguments it reads), bypassing plan-time choices."""
    from interp.evaluator import EqnContext
    from interp.options import make_options
    from interp.registry import RULES
    jaxpr = jax.make_jaxpr(fn)(*arrays).jaxpr
    (eqn,) = jaxpr.eqns
    value = dict(zip(jaxpr.invars, arrays))
    ins = [value[v] for v in eqn.invars]
    return np.asarray(RULES[name](EqnContext(eqn, make_options(None)), *ins, **eqn.params))


@pytest.mark.parametrize("dtype", RANK0_DTYPES, ids=ids(RANK0_DTYPES))
def test_rank0_integer_fast_path_matches_general_rule_and_xla(dtype):
    """Each rank-0 integer/bool equation is planned on Python ints (py_int_*), and gives, for every
    pair of values (all of them for bool and int8), the general rule's bits and dtype on the same
    pairs as arrays, and XLA:CPU's: wrap-around, x / 0 == -1, x % 0 == x, INT_MIN / -1 == INT_MIN,
    shift amounts >= the width or negative."""
    v = rank0_values(dtype)
    fns = {**RANK0_BINARY, **RANK0_UNARY}
    if dtype == np.bool_:
        fns = {k: f for k, f in fns.items() if k in RANK0_BOOL}
    elif D.is_unsigned(dtype):
        del fns["abs"]     # (JAX rejects it: test_unsigned_abs_rejected_like_jax)
    a, b = (g.ravel() for g in np.meshgrid(v, v))
    operands = {name: (a, b) if name in RANK0_BINARY else (v,) for name in fns}
    xla = xla_cpu(lambda a, b, v: [fn(*((a, b) if name in RANK0_BINARY else (v,)))
                                   for name, fn in fns.items()], a, b, v)
    for (name, fn), from_xla in zip(fns.items(), xla):
        arrays = operands[name]
        rule, ctx = _rank0_step(fn, *(np.zeros((), dtype) for _ in arrays))
        assert rule.__name__ == f"py_int_{name}", (name, rule)
        want = _general(fn, name, *arrays)
        np.testing.assert_array_equal(want, from_xla, err_msg=name)
        assert want.dtype == from_xla.dtype
        scalars = [list(x) for x in arrays]    # NumPy scalars, and 0-d arrays for some
        got = [rule(ctx, *[np.asarray(s[i]) if i % 3 == 0 else s[i] for s in scalars])
               for i in range(len(scalars[0]))]
        assert all(type(g) is want.dtype.type for g in got), name
        assert_same_bits(np.array(got, dtype=want.dtype), want, err_msg=name)


def test_rank0_integer_fast_path_with_literals():
    """Rank-0 integer arithmetic with literal operands (a kernel's slot and index arithmetic) through
    the whole interpreter, on every dtype with special values: equal to XLA:CPU, dtype included."""
    def slots(i, j):
        return ((i * 3 + 7) % 4, (i + j) // 2, lax.rem(i, j), lax.div(i, j), i >> 1, i << 3,
                jnp.where(i < j, i, j), (i ^ 5) & j, -i, ~i)
    for dtype in (np.dtype(t) for t in (np.int8, np.uint32, np.int64)):
        v = special_values(dtype)
        for i in v:
            for j in v[::2]:
                ref = interp.interpret(slots)(i, j)
                xla = xla_cpu(slots, i, j)
                for r, x in zip(ref, xla):
                    assert r.dtype == x.dtype and r.shape == ()
                    assert r == x, (dtype, i, j, ref, xla)


RANK0_SELECT = tuple(np.dtype(t) for t in (np.bool_, np.int32, np.uint64, np.float16, np.float32,
                                            ml_dtypes.bfloat16, np.complex64))


@pytest.mark.parametrize("dtype", RANK0_SELECT, ids=ids(RANK0_SELECT))
def test_rank0_select_n_fast_path(dtype):
    """Rank-0 select_n is planned as an index into its cases (py_select_n): the chosen case's bits
    (NaN payloads, -0.0) and dtype, as the general rule and XLA:CPU give, and a predicate out of
    range is the general rule's UndefinedBehaviorError, with its message."""
    v = np.array([False, True]) if D.is_bool(dtype) else values(dtype)
    cases = [np.roll(v, k).astype(dtype) for k in range(3)]
    which = np.array([0, 1, 2] * (len(v) // 3 + 1))[:len(v)].astype(np.int32)
    pred = np.resize(np.array([False, True]), len(v))
    for fn, pick in ((lambda p, a, b, c: lax.select_n(p, a, b), pred),
                     (lambda w, a, b, c: lax.select_n(w, a, b, c), which)):
        rule, ctx = _rank0_step(fn, pick[0], *(c[0] for c in cases))
        assert rule.__name__ == "py_select_n"
        want = _general(fn, "select_n", pick, *cases)
        assert_same_bits(want, xla_cpu(fn, pick, *cases))
        got = [rule(ctx, pick[i], *(np.asarray(c[i]) for c in cases[:len(ctx.in_avals) - 1]))
               for i in range(len(v))]
        assert all(type(g) is dtype.type for g in got)
        assert_same_bits(np.array(got, dtype=dtype), want)
    three = jax.make_jaxpr(lambda w, a, b, c: lax.select_n(w, a, b, c))(which[0], *(c[0] for c in cases))
    for bad in (-1, 3, np.iinfo(np.int32).max):
        with pytest.raises(UndefinedBehaviorError) as fast:
            interp.eval_jaxpr(three, np.int32(bad), *(c[0] for c in cases))
        with pytest.raises(UndefinedBehaviorError) as general:
            _general(lambda w, a, b, c: lax.select_n(w, a, b, c), "select_n", np.array([bad], np.int32),
                     *(c[:1] for c in cases))
        assert str(fast.value) == str(general.value)


@functools.lru_cache(maxsize=None)
def _rank0_and_general(name, dtype):
    """(the planned rank-0 rule and its context, the general rule and a context for 1-element
    arrays) of ``name`` on ``dtype``."""
    from interp.evaluator import EqnContext
    from interp.options import make_options
    from interp.registry import RULES
    fn = {**RANK0_BINARY, **RANK0_UNARY}[name]
    arity = 2 if name in RANK0_BINARY else 1
    rank0 = _rank0_step(fn, *(np.zeros((), dtype) for _ in range(arity)))
    (eqn,) = jax.make_jaxpr(fn)(*(np.zeros(1, dtype) for _ in range(arity))).jaxpr.eqns
    return rank0, (RULES[name], EqnContext(eqn, make_options(None)), eqn.params)


RANK0_WIDE = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64))


@pytest.mark.parametrize("dtype", RANK0_WIDE, ids=ids(RANK0_WIDE))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_rank0_integer_fast_path_hypothesis(dtype, data):
    """Random pairs of the wide integer types (and shift amounts near the bit width): every
    rank-0 Python-int rule gives the general rule's bits and dtype."""
    info = np.iinfo(dtype)
    n = D.bit_width(dtype)
    values = st.one_of(st.integers(int(info.min), int(info.max)),
                       st.integers(max(int(info.min), -2 * n), 2 * n))
    x, y = dtype.type(data.draw(values)), dtype.type(data.draw(values))
    for name in (*RANK0_BINARY, *RANK0_UNARY):
        if name == "abs" and D.is_unsigned(dtype):
            continue
        (rule, ctx), (general, actx, params) = _rank0_and_general(name, dtype)
        args = (x, y) if name in RANK0_BINARY else (x,)
        want = np.asarray(general(actx, *(np.array([a]) for a in args), **params))[0]
        got = rule(ctx, *args)
        assert type(got) is type(want), (name, x, y)
        assert_same_bits(np.array([got]), np.array([want]), err_msg=f"{name}({x}, {y})")
