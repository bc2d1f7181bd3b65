"""convert_element_type, bitcast_convert_type, reduce_precision: the reference against XLA:CPU
(bitwise), exact oracles and hand-computed values.

Every value of every type of <= 16 bits is converted to every type; 32/64-bit sources use random
bit patterns, special values and the neighbours of the integer bounds. Where XLA:CPU computes
something else by design (flushes f32/bf16/f64 subnormals, rounds f64->f16/bf16 and int->bf16
twice through float32: spec/lax_conversions.py BACKEND_PROPERTIES) the reference is checked
against an exact oracle and XLA:CPU against a model of what it does.
"""
from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import interp
from conformance.values import assert_same_bits, special_values
from interp import dtypes as D
from tests.support import x64, xla_cpu
from tests.test_lax_elementwise import (E8M0, all_values, flushed, ids, round_fraction, same_bits_mask,
                                        xla_eager)

F4 = np.dtype(ml_dtypes.float4_e2m1fn)
SMALL = tuple(d for d in D.ALL if D.bit_width(d) <= 8)
MID = tuple(d for d in D.ALL if D.bit_width(d) == 16)
WIDE = tuple(d for d in D.ALL if D.bit_width(d) >= 32)
# (source kinds, destination) pairs XLA:CPU rounds twice, through float32
DOUBLE_ROUNDED = {np.dtype(np.float16), D.bfloat16}


@pytest.fixture(autouse=True, scope="module")
def _x64():
    with x64(True):
        yield


def convert_fn(dtype):
    return lambda v: lax.convert_element_type(v, dtype)


def xla_double_rounds(src, dst) -> bool:
    """XLA:CPU converts through float32 (two roundings): f64 -> f16/bf16 and int -> bf16."""
    src, dst = np.dtype(src), np.dtype(dst)
    if D.is_complex(src):
        src = np.dtype(np.float64) if src == np.complex128 else np.dtype(np.float32)
    if src == np.float64 and dst in DOUBLE_ROUNDED:
        return True
    return D.is_int(src) and D.bit_width(src) >= 32 and dst == D.bfloat16


def exact_value(v) -> Fraction | float:
    v = np.asarray(v)
    if D.is_int(v.dtype) or D.is_bool(v.dtype):
        return Fraction(int(v))
    if D.is_complex(v.dtype):
        v = v.real
    f = float(v.astype(np.float64)) if v.dtype != E8M0 else float(v.astype(np.float32))
    return f if not math.isfinite(f) else Fraction(f)


def oracle_float(xs, dst) -> np.ndarray:
    """Exact value rounded once to an IEEE float dst (f16/bf16/f32/f64), by Fraction arithmetic."""
    out = []
    for v in xs:
        e = exact_value(v)
        if e == 0 and not isinstance(e, float):
            v = np.asarray(v).real if D.is_complex(np.asarray(v).dtype) else np.asarray(v)
            neg = D.is_float(v.dtype) and np.signbit(v.astype(np.float32))
            out.append(np.array(-0.0 if neg else 0.0).astype(dst))
        else:
            out.append(round_fraction(e, dst))
    return np.array(out, dtype=dst)


def check_conversions(x, dsts):
    """Reference vs XLA:CPU for x converted to each of ``dsts`` (one compilation); flushed
    elements vs an exact oracle (float dsts) or `x != 0` (bool); double-rounded pairs: XLA:CPU
    vs its model, the reference vs the exact oracle."""
    dsts = [np.dtype(d) for d in dsts]
    fn = lambda v: tuple(lax.convert_element_type(v, d) for d in dsts)   # noqa: E731
    refs, xlas = interp.interpret(fn)(x), xla_cpu(fn, x)
    for dst, ref, xla in zip(dsts, refs, xlas):
        _check_one(x, dst, ref, xla)


def check_conversion(x, dst):
    check_conversions(x, [dst])


def _check_one(x, dst, ref, xla):
    assert ref.dtype == xla.dtype == np.dtype(dst)
    skip = flushed(x) | flushed(ref) | flushed(xla)
    if xla_double_rounds(x.dtype, dst):
        # XLA:CPU: x -> float32 -> dst. The reference rounds once: checked by the oracle below.
        with np.errstate(all="ignore"):
            mid = np.asarray(x).real.astype(np.float32)
        model = mid.astype(dst)
        skip |= flushed(mid)    # (the float32 intermediate is flushed too)
        assert same_bits_mask(xla, model)[~skip].all(), "XLA:CPU is not the double-rounding model"
        want = oracle_float(x, dst)
        assert_same_bits(ref, want, err_msg=f"{x.dtype}->{dst} vs exact oracle")
        return
    bad = ~same_bits_mask(ref, xla) & ~skip
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise AssertionError(f"{x.dtype}->{np.dtype(dst)}: {bad.sum()} differ from XLA:CPU, first "
                             f"{x.ravel()[i]!r}: ref {ref.ravel()[i]!r} xla {xla.ravel()[i]!r}")
    if skip.any():
        xs = x.ravel()[skip.ravel()]
        got = ref.ravel()[skip.ravel()]
        if D.is_bool(dst):
            np.testing.assert_array_equal(got, [exact_value(v) != 0 for v in xs])
        elif D.is_float(dst) and dst not in D.ML_FLOATS or dst == D.bfloat16:
            assert_same_bits(got, oracle_float(xs, dst), err_msg="flushed-on-XLA elements vs oracle")
        elif D.is_complex(dst):
            part = np.float32 if dst == np.complex64 else np.float64
            assert_same_bits(got.real, oracle_float(xs, part))


def every_value(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if D.is_bool(dtype):
        return np.array([False, True])
    if dtype in SMALL:
        return all_values(dtype)
    n = D.bit_width(dtype)
    u = np.arange(2 ** n, dtype=np.uint64).astype(D.storage_uint(dtype))
    return u.view(dtype)


@pytest.mark.parametrize("src", SMALL + MID, ids=ids(SMALL + MID))
def test_every_value_to_every_type(src):
    check_conversions(every_value(src), D.ALL)


def wide_sample(dtype, n=3000, seed=0) -> np.ndarray:
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if D.is_complex(dtype):
        part = wide_sample(np.float32 if dtype == np.complex64 else np.float64, n, seed)
        out = np.empty(part.size, dtype)
        out.real, out.imag = part, part[::-1]
        return out
    u = rng.integers(0, 2 ** 63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    x = u.astype(D.storage_uint(dtype)).view(dtype)
    specials = special_values(dtype)
    bounds = [2 ** k + d for k in (7, 8, 15, 16, 31, 32, 63, 64) for d in (-1, 0, 1)]
    with np.errstate(all="ignore"):
        if D.is_float(dtype):
            near = np.array([b * s + f for b in bounds for s in (1, -1) for f in (0.0, 0.5)], np.float64)
            extra = np.concatenate([near, rng.standard_normal(n) * 10.0 ** rng.integers(-5, 20, n)]).astype(dtype)
        else:
            info = D.iinfo(dtype)
            extra = np.array([b for b in bounds + [-b for b in bounds] if info.min <= b <= info.max],
                             np.int64 if D.is_signed(dtype) else np.uint64).astype(dtype)
    return np.concatenate([x, specials, extra])


@pytest.mark.parametrize("src", WIDE, ids=ids(WIDE))
def test_wide_sources_to_every_type(src):
    check_conversions(wide_sample(src), D.ALL)


@pytest.mark.parametrize("dst", [np.float16, D.bfloat16] + [d for d in D.ML_FLOATS if d not in (D.bfloat16, E8M0)],
                         ids=ids([np.float16, D.bfloat16] + [d for d in D.ML_FLOATS if d not in (D.bfloat16, E8M0)]))
def test_float64_and_int64_round_once_near_ties(dst):
    """Values just above, at and just below each halfway point of dst: one rounding (oracle);
    XLA:CPU rounds f64 -> f16/bf16 through float32 (model), and f64 -> float8/float4 once."""
    dst = np.dtype(dst)
    t = every_value(dst).astype(np.float64) if dst != np.float16 else every_value(dst).astype(np.float64)
    t = np.unique(np.abs(t[np.isfinite(t)]))
    mids = (t[:-1] + t[1:]) / 2
    if mids.size > 1200:   # every halfway point of the small types; a spread of 1200 otherwise
        mids = mids[np.linspace(0, mids.size - 1, 1200).astype(int)]
    x = np.concatenate([mids * (1 + 2.0 ** -40), mids, mids * (1 - 2.0 ** -40)])
    x = np.concatenate([x, -x])
    if dst in D.ML_FLOATS and dst != D.bfloat16:
        ref = interp.interpret(convert_fn(dst))(x)
        want = oracle_float(x, np.float64).astype(np.float64)   # exact inputs
        want = np.array([round_fraction(Fraction(float(v)), dst) for v in want], dst)
        assert_same_bits(ref, want)
        assert_same_bits(xla_cpu(convert_fn(dst), x), want)
    else:
        check_conversion(x, dst)
    if dst == D.bfloat16:
        ints = np.array([2 ** 40 + 2 ** 32 + 1, 2 ** 40 + 2 ** 32, 2 ** 40 + 2 ** 32 - 1, -(2 ** 62 + 2 ** 54 + 1),
                         2 ** 63 - 1, -(2 ** 63), 2 ** 24 + 2 ** 16 + 1], np.int64)
        for dtype in (np.int64, np.int32, np.uint64):
            v = ints.astype(dtype) if dtype != np.int32 else ints[-1:].astype(dtype)
            check_conversion(v, dst)
        # by hand: 2**40 + 2**32 + 1 is above the halfway point between 2**40 and 2**40 + 2**33
        got = interp.interpret(convert_fn(dst))(np.array([2 ** 40 + 2 ** 32 + 1], np.int64))
        assert float(got[0]) == 2.0 ** 40 + 2.0 ** 33


def test_float_to_int_by_hand():
    f = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, -1.5, 1.9, 2.0 ** 31, -(2.0 ** 31), 2147483520.0], np.float32)
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.int32))(f),
                                  [0, 2 ** 31 - 1, -(2 ** 31), 2 ** 31 - 1, -(2 ** 31), -1, 1, 2 ** 31 - 1,
                                   -(2 ** 31), 2147483520])
    u = np.array([np.nan, np.inf, -np.inf, 300.0, -1.5, 255.9], np.float32)
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.uint8))(u), [0, 255, 0, 255, 0, 255])
    # XLA compares with INT_MAX rounded into the source type: float4 6.0 >= float4(127) == 6.0
    f4 = np.array([6.0, -6.0, 4.0], F4)
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.int8))(f4), [127, -128, 4])


def test_narrow_float_overflow_by_hand():
    x = np.array([1e6, 464.0, 480.0, np.inf, np.nan, 61440.0, 3.0, -1e6, 0.0], np.float32)

    def conv(dst):
        return interp.interpret(convert_fn(dst))(x).astype(np.float32)

    e4 = conv(np.dtype(ml_dtypes.float8_e4m3fn))
    assert np.isnan(e4[0]) and e4[1] == 448 and np.isnan(e4[2]) and np.isnan(e4[3])
    assert conv(np.dtype(ml_dtypes.float8_e5m2))[5] == np.inf
    e8 = conv(E8M0)
    assert e8[0] == 2.0 ** 20 and e8[6] == 4.0 and np.isnan(e8[7]) and np.isnan(e8[8])
    f4 = interp.interpret(convert_fn(F4))(x)
    assert float(f4[0]) == 6.0 and float(f4[3]) == 6.0
    assert float(f4[4]) == 0.0 and np.signbit(f4[4].astype(np.float32))   # NaN -> -0.0
    assert interp.interpret(convert_fn(np.float16))(np.array([65520.0], np.float32))[0] == np.inf


def test_complex_and_bool_by_hand():
    z = np.array([1.5 + 2j, -2.5 - 0j, np.nan + 1j, 0 + 1j, 0j], np.complex64)
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.int32))(z), [1, -2, 0, 0, 0])
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.bool_))(z), [True, True, True, False, False])
    np.testing.assert_array_equal(interp.interpret(convert_fn(np.bool_))(np.array([np.nan, -0.0, 2.0 ** -149], np.float32)),
                                  [True, False, True])
    assert interp.interpret(convert_fn(np.float32))(np.array([True, False])).tolist() == [1.0, 0.0]


def test_x64_off_and_weak_types():
    with x64(False):
        x = np.array([1.5, -2.5, 3e9, np.nan], np.float32)
        for fn in (lambda v: v.astype(jnp.int32) + 1, lambda v: (v * 2).astype(jnp.uint8),
                   lambda v: jnp.asarray(v, jnp.bfloat16) + 1.0, lambda v: v.astype(jnp.int8) * 3):
            ref = interp.interpret(fn)(x)
            assert_same_bits(ref, xla_cpu(fn, x))


def test_grad_through_conversions():
    f = jax.vmap(jax.grad(lambda v: lax.convert_element_type(
        lax.convert_element_type(v, jnp.bfloat16) * 3, jnp.float32) ** 2))
    x = np.linspace(-3, 3, 11).astype(np.float32)
    assert_same_bits(interp.interpret(f)(x), xla_eager(f, x))


# --- bitcast_convert_type ----------------------------------------------------------------------------

BITCASTABLE = tuple(d for d in D.ALL if not D.is_bool(d) and not D.is_complex(d))
PAIRS = [(s, d) for s in BITCASTABLE for d in BITCASTABLE
         if D.bit_width(s) % D.bit_width(d) == 0 or D.bit_width(d) % D.bit_width(s) == 0]


@pytest.mark.parametrize("src", BITCASTABLE, ids=ids(BITCASTABLE))
def test_bitcast_convert_type(src):
    rng = np.random.default_rng(5)
    inputs, dsts = [], []
    for s, d in PAIRS:
        if s != src:
            continue
        k = max(1, D.bit_width(d) // D.bit_width(s))
        n = D.bit_width(s)
        u = rng.integers(0, 2 ** min(n, 63), (4, 2 * k), dtype=np.uint64)
        if n == 64:
            u = u * np.uint64(2) + rng.integers(0, 2, u.shape, dtype=np.uint64)
        if D.is_int(s):
            x = u.astype(np.int64 if n < 64 else np.uint64)
            x = (x.astype(np.int64) + int(D.iinfo(s).min)).astype(s) if n < 64 else x.view(
                np.int64 if D.is_signed(s) else np.uint64).astype(s)
        else:
            x = u.astype(D.storage_uint(s)).view(s)
        inputs.append(x.reshape(4, 2, k) if k > 1 else x)
        dsts.append(d)
    fn = lambda *xs: tuple(lax.bitcast_convert_type(v, d) for v, d in zip(xs, dsts))   # noqa: E731
    refs, xlas = interp.interpret(fn)(*inputs), xla_cpu(fn, *inputs)   # one compilation per source
    for d, ref, xla in zip(dsts, refs, xlas):
        assert ref.shape == xla.shape and ref.dtype == xla.dtype
        assert_same_bits(ref, xla, nan_payloads=True, err_msg=f"{src}->{d}")


def test_bitcast_by_hand():
    got = interp.interpret(lambda v: lax.bitcast_convert_type(v, jnp.uint8))(np.array([1.0], np.float32))
    np.testing.assert_array_equal(got, [[0, 0, 0x80, 0x3F]])    # little-endian byte order
    i4 = np.array([[1, -2]], ml_dtypes.int4)                      # element 0 in the low nibble
    got = interp.interpret(lambda v: lax.bitcast_convert_type(v, jnp.uint8))(i4)
    np.testing.assert_array_equal(got, [0xE1])
    back = interp.interpret(lambda v: lax.bitcast_convert_type(v, ml_dtypes.int4))(got)
    np.testing.assert_array_equal(back.astype(int), [[1, -2]])


# --- reduce_precision --------------------------------------------------------------------------------

FORMATS = [(5, 10), (8, 7), (4, 3), (5, 2), (2, 1), (8, 23), (11, 52), (1, 0), (8, 0), (6, 20)]


@pytest.mark.parametrize("dtype", D.FLOATS, ids=ids(D.FLOATS))
def test_reduce_precision(dtype):
    x = every_value(dtype) if D.bit_width(dtype) <= 16 else wide_sample(dtype)
    fn = lambda v: tuple(lax.reduce_precision(v, e, m) for e, m in FORMATS)   # noqa: E731
    for (e, m), ref, xla in zip(FORMATS, interp.interpret(fn)(x), xla_cpu(fn, x)):
        ok = same_bits_mask(ref, xla) | flushed(x) | flushed(ref) | flushed(xla)
        assert ok.all(), (e, m, x[~ok][:3], ref[~ok][:3], xla[~ok][:3])


def test_reduce_precision_by_hand():
    def rp(v, e, m):
        return interp.interpret(lambda a: lax.reduce_precision(a, e, m))(np.array(v, np.float32))

    assert rp([1 + 2.0 ** -8 + 2.0 ** -20], 8, 7)[0] == 1 + 2.0 ** -7   # above the tie: up
    assert rp([1 + 2.0 ** -8], 8, 7)[0] == 1.0                           # tie: to even
    assert rp([1 + 3 * 2.0 ** -8], 8, 7)[0] == 1 + 2.0 ** -6             # tie: to even (up)
    assert rp([65519.0, 65520.0, -1e6], 5, 10).tolist() == [65504.0, np.inf, -np.inf]
    out = rp([1e-8, -1e-8, 2.0 ** -14, 2.0 ** -15], 5, 10)               # reduced subnormals flush
    assert out.tolist() == [0.0, 0.0, 2.0 ** -14, 0.0] and np.signbit(out[1])
    assert np.isnan(rp([np.nan], 5, 10)[0]) and np.isnan(rp([np.nan], 8, 0)[0])


def test_scalar_operands_keep_shape():
    x = np.float64(1 + 2.0 ** -30)
    assert interp.interpret(convert_fn(D.bfloat16))(x).shape == ()
    assert interp.interpret(lambda v: lax.bitcast_convert_type(v, jnp.int32))(np.float32(1)).shape == ()
    assert interp.interpret(lambda v: lax.reduce_precision(v, 5, 2))(np.array(1.3, D.bfloat16)).shape == ()
    assert interp.interpret(lambda v: lax.reduce_precision(v, 5, 2))(np.float32(1.3)).shape == ()


NATIVE = (D.BOOL,) + tuple(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64))


@pytest.mark.parametrize("src", NATIVE, ids=ids(NATIVE))
def test_scalar_conversions_between_native_types(src):
    """Rank-0 operands (the plan's astype fast path where every value is kept, convert otherwise)
    to every native type, against XLA:CPU: special values and integer extremes as NumPy scalars."""
    dsts = NATIVE + (np.dtype(np.complex64), np.dtype(np.complex128))
    fn = lambda v: tuple(lax.convert_element_type(v, d) for d in dsts)   # noqa: E731
    vals = [np.bool_(False), np.bool_(True)] if D.is_bool(src) else list(special_values(src))
    for v in vals:
        refs, xlas = interp.interpret(fn)(v), xla_cpu(fn, v)
        for dst, ref, xla in zip(dsts, refs, xlas):
            assert np.shape(ref) == ()
            _check_one(np.asarray(v).reshape(1), dst, np.asarray(ref).reshape(1), xla.reshape(1))


def test_to_and_from_an_extended_dtype_keep_the_bits():
    # jax.experimental.primal_tangent_dtype allows conversion (dtypes.py PrimalTangentDType):
    # convert_element_type binds to_edtype / from_edtype (lax.py). XLA:CPU runs the round trip;
    # an extended value alone has no jax.jit result, so the reference's value is checked against
    # its definition (the operand, bits unchanged).
    from jax.experimental import primal_tangent_dtype
    from interp.extended import ExtendedArray
    edtype = primal_tangent_dtype(jnp.bfloat16, jnp.float32)
    x = np.array([1.5, -0.0, np.nan, np.inf, 2 ** -120], ml_dtypes.bfloat16)

    def round_trip(a):
        e = jax.jit(lambda v: v)(lax.convert_element_type(a, edtype))   # through a call
        e = lax.cond(a[0] > 0, lambda v: v, lambda v: v, e)             # and a conditional
        return lax.convert_element_type(e, jnp.bfloat16) * 2
    names = {e.primitive.name for e in jax.make_jaxpr(round_trip)(x).eqns}
    assert {"to_edtype", "from_edtype"} <= names
    assert_same_bits(interp.interpret(round_trip)(x), xla_cpu(round_trip, x))
    value = interp.interpret(lambda a: lax.convert_element_type(a, edtype))(x)
    assert isinstance(value, ExtendedArray) and value.dtype == edtype and value.shape == x.shape
    assert_same_bits(value.data, x)
    with pytest.raises(TypeError, match="no NumPy value"):
        np.asarray(value)
