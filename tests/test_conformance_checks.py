"""Compliance checkers against hand-computed cases (spec/compliance.py modes, conformance/checks.py)."""
import math

import numpy as np
import pytest

from conformance import checks
from interp import dtypes as D
from spec import compliance as C

U = 2.0 ** -24   # float32 unit roundoff


def f32(*v):
    return np.array(v, np.float32)


def test_ulp_distance_hand_values():
    one = np.float32(1)
    up = np.nextafter(one, np.float32(2))
    down2 = np.nextafter(np.nextafter(one, np.float32(0)), np.float32(0))
    ref = f32(1, 1, 0, np.nan, np.nan, np.inf, 1e-45)
    out = np.array([up, down2, -0.0, np.nan, 1.0, np.finfo(np.float32).max, -1e-45], np.float32)
    d = checks.ulp_distance(ref, out)
    assert d.tolist() == [1, 2, 0, 0, math.inf, 1, 2]
    # float64 across zero: the two smallest subnormals of opposite signs are 2 apart.
    t = np.array([5e-324], np.float64)
    assert checks.ulp_distance(t, -t).tolist() == [2]
    assert checks.ulp_distance(np.array([1.0]), np.array([1.0 + 2 ** -52 * 3])).tolist() == [3]
    # bfloat16: 1.0 and 1.0078125 are neighbours (7 explicit mantissa bits).
    b = np.array([1.0, 1.0078125], D.bfloat16)
    assert checks.ulp_distance(b[:1], b[1:]).tolist() == [1]
    # 0-d outputs (a scalar loss): a NaN on one side only is infinitely far.
    assert checks.ulp_distance(np.float32(1), up).tolist() == 1
    assert checks.ulp_distance(np.float32(np.nan), np.float32(1)).tolist() == math.inf


def test_exact_mode_reports_first_mismatch_and_ignores_nan_payloads():
    ref = f32(1, 2, np.nan, 4)
    out = ref.copy()
    out.view(np.uint32)[2] = 0x7FC00001          # another NaN payload: still equal
    assert checks.check(C.exact(), ref, out).passed
    out[3] = np.nextafter(np.float32(4), np.float32(5))
    r = checks.check(C.exact(), ref, out)
    assert not r.passed and r.mismatches == 1 and r.max_ulp == 1
    assert r.first_mismatch["index"] == [3]
    assert r.first_mismatch["reference"].startswith("4.0") and "0x40800001" in r.first_mismatch["backend"]
    # The sign of zero is a difference under EXACT.
    assert not checks.check(C.exact(), f32(0.0), f32(-0.0)).passed


@pytest.mark.parametrize("shape", [(), (130,), (3, 5)])
def test_exact_complex128_one_value_per_element(shape):
    # No 128-bit integer: the bits of a complex128 element must still be one value per element
    # (a uint64 view doubled the last axis: wrong first-mismatch index, 0-d outputs crashed).
    from conformance.values import assert_same_bits, bits
    ref = (np.arange(int(np.prod(shape))) + 0.5j).astype(np.complex128).reshape(shape)
    out = ref.copy()
    k = int(np.prod(shape)) - 1
    out.reshape(-1)[k] = complex(ref.reshape(-1)[k].real, -0.5)      # the imaginary sign only
    assert bits(ref).shape == shape
    assert int(bits(np.array(1 + 2j))) == (0x3FF0000000000000 << 64) | 0x4000000000000000
    r = checks.check(C.exact(), ref, out)
    assert not r.passed and r.mismatches == 1
    assert r.first_mismatch["index"] == list(np.unravel_index(k, shape))
    assert checks.check(C.exact(), ref, ref.copy()).passed
    with pytest.raises(AssertionError, match="1 of"):
        assert_same_bits(out, ref)


def test_exact_integers_and_dtype_mismatch():
    r = checks.check(C.exact(), np.array([1, -5], np.int32), np.array([1, -4], np.int32))
    assert not r.passed and r.max_abs_err == 1 and r.first_mismatch["index"] == [1]
    r = checks.check(C.exact(), np.zeros(3, np.int32), np.zeros(3, np.int64))
    assert not r.passed and "int64" in r.detail


def test_ulp_mode_budget_and_specials():
    x = np.float32(1.5)
    ref = f32(x, x, 0.0, np.inf)
    near = [x, x, x, x]
    for _ in range(2):
        near[0] = np.nextafter(near[0], np.float32(2))
    near[1] = near[0]
    near[1] = np.nextafter(near[1], np.float32(2))          # 3 ulp
    out = np.array([near[0], near[1], -0.0, np.inf], np.float32)
    r = checks.check(C.ulp(2, "test"), ref, out)
    assert r.mismatches == 1 and r.first_mismatch["index"] == [1] and r.max_ulp == 3
    # +-0 compare equal under ULP; an infinity must stay an infinity.
    assert checks.check(C.ulp(2, "test"), f32(0.0), f32(-0.0)).passed
    big = np.finfo(np.float32).max
    assert not checks.check(C.ulp(2, "test"), f32(np.inf), f32(big)).passed
    assert not checks.check(C.ulp(2, "test"), f32(np.nan), f32(1.0)).passed


def test_dot_product_bound_hand_computed():
    # K = 4, sum|a||b| = S = 8: gamma = K u / (1 - K u) + u (f32 output, exact inputs).
    S = np.array([8.0])
    gamma = 4 * U / (1 - 4 * U) + U
    ref = f32(2.0)
    inside = np.float32(2.0 + 0.9 * gamma * 8)          # representable error below the bound
    outside = np.float32(2.0 + 1.5 * gamma * 8)
    assert abs(float(inside) - 2.0) <= gamma * 8 < abs(float(outside) - 2.0)
    assert checks.check(C.dot_product(4), ref, np.array([inside]), bound=S).passed
    r = checks.check(C.dot_product(4), ref, np.array([outside]), bound=S)
    assert not r.passed and r.max_abs_err == pytest.approx(abs(float(outside) - 2.0))
    # Inputs rounded to bf16 (8 significant bits) widen the bound by 2 * 2^-8 relative.
    loose = np.float32(2.0 + 8 * 2 * 2.0 ** -8 * 0.9)
    assert not checks.check(C.dot_product(4), ref, np.array([loose]), bound=S).passed
    assert checks.check(C.dot_product(4, input_bits=8), ref, np.array([loose]), bound=S).passed
    # bf16 outputs accumulate in f32 (u_acc = 2^-24) and round once at bf16 (u_out = 2^-8).
    bref = np.array([1.0], D.bfloat16)
    b_ok = np.array([1.0078125], D.bfloat16)       # 1 bf16 ulp = 2^-7 > u_out * S for S = 1
    assert not checks.check(C.dot_product(500), bref, b_ok, bound=np.array([1.0])).passed
    assert checks.check(C.dot_product(500), bref, b_ok, bound=np.array([2.0])).passed


def test_dot_product_sum_accumulated_in_the_operand_type():
    # float16 [2048, 1 x 63] added in float16 in order: every 2048 + 1 ties back to 2048.
    x = np.array([2048.0] + [1.0] * 63, np.float16)
    in_order = np.float16(0)
    for v in x:
        in_order = np.float16(in_order + v)
    exact = np.array([2111.0]).astype(np.float16)          # 2112: the correctly rounded sum
    S = np.array([2111.0])
    assert float(in_order) == 2048.0
    assert not checks.check(C.dot_product(64), exact, np.array([in_order]), bound=S).passed
    assert checks.check(C.dot_product(64, acc_bits=11), exact, np.array([in_order]), bound=S).passed


def test_dot_product_partial_sums_that_can_overflow_allow_any_result():
    # [3e38, 3e38, -3e38] . [1, 1, 1] = 3e38 exactly, but added left to right in float32 the first
    # partial sum overflows: inf (and NaN where opposite infinities meet) is a float32 result too.
    a = np.array([3e38, 3e38, -3e38], np.float32)
    with np.errstate(over="ignore"):
        in_order = (a[0] + a[1]) + a[2]
    ref = np.array([3e38], np.float32)
    S = np.array([9e38])
    assert np.isinf(in_order)
    for got in (in_order, np.float32(np.nan), np.float32(3e38)):
        assert checks.check(C.dot_product(3), ref, np.array([got]), bound=S).passed
    # Where no partial sum can overflow, NaN is wrong.
    assert not checks.check(C.dot_product(3), ref, np.array([np.nan], np.float32), bound=np.array([3e38])).passed


def test_dot_product_at_the_output_overflow_threshold():
    # An exact sum just past float16's largest value rounds to inf; one within the bound of it may
    # come out as 65504 from another order (the bound straddles the threshold), never as -inf.
    ref = np.array([np.inf], np.float16)
    S = np.array([65520.0 * 2])
    assert checks.check(C.dot_product(2), ref, np.array([65504.0], np.float16), bound=S).passed
    assert not checks.check(C.dot_product(2), ref, np.array([-np.inf], np.float16), bound=S).passed
    assert not checks.check(C.dot_product(2), ref, np.array([1.0], np.float16), bound=S).passed


def test_abs_rel_bound():
    eps = float(np.finfo(np.float32).eps)
    mode = C.abs_rel(2, 0, "test")
    ref = f32(0.0)
    assert checks.check(mode, ref, f32(1.9 * eps * 10), magnitude=10.0).passed
    assert not checks.check(mode, ref, f32(2.1 * eps * 10), magnitude=10.0).passed
    with pytest.raises(ValueError):
        checks.check(mode, ref, ref)


def test_fp_special_only_checks_placement():
    ref = f32(1.0, np.nan, np.inf, -0.0)
    assert checks.check(C.fp_special(), ref, f32(123.0, np.nan, np.inf, -0.0)).passed
    assert not checks.check(C.fp_special(), ref, f32(1.0, 2.0, np.inf, -0.0)).passed
    assert not checks.check(C.fp_special(), ref, f32(1.0, np.nan, np.inf, 0.0)).passed


def test_statistical_mode():
    rng = np.random.default_rng(0)
    good = rng.integers(0, 2 ** 32, size=4096, dtype=np.uint64).astype(np.uint32)
    assert checks.check(C.statistical(), good, good).passed
    zeros = np.zeros(4096, np.int32)
    r = checks.check(C.statistical(), good.view(np.int32), zeros)
    assert not r.passed and "bit 0" in r.detail and "repeated values" in r.detail
    biased = good & np.uint32(0xFFFFFFFE)               # lowest bit always 0
    r = checks.check_statistical(biased)
    assert not r.passed and "bit 0" in r.detail
    assert not checks.check_statistical(good[:10]).passed   # too few samples to judge


def test_check_any_accepts_either_reference_per_element():
    ref = f32(1e-45, 2.0)
    flushed = f32(0.0, 2.0)
    out = f32(0.0, 2.0)
    assert not checks.check(C.exact(), ref, out).passed
    assert checks.check_any(C.exact(), [ref, flushed], out).passed
    assert not checks.check_any(C.exact(), [ref, flushed], f32(0.0, 3.0)).passed


def test_mode_for_primitive_defaults():
    assert C.mode_for_primitive("add", np.float32).kind == C.EXACT
    assert C.mode_for_primitive("exp", np.int32).kind == C.EXACT
    m = C.mode_for_primitive("exp", np.float32)
    assert (m.kind, m.ulp, m.source) == (C.ULP, 6, "xla-accuracy-budget")
    m = C.mode_for_primitive("erf_inv", np.float32)
    assert (m.ulp, m.source) == (C.JTU_F32_ULP, "jtu-tolerance")
    assert C.mode_for_primitive("tanh", D.bfloat16).ulp == 1
    assert C.mode_for_primitive("tanh", np.float64).ulp == C.JTU_F64_ULP
    for m in (C.exact(), C.ulp(1, "measured"), C.mode_for_primitive("not_a_primitive", np.float32)):
        assert m.source in C.SOURCES


def test_dot_product_compares_rounding_intervals_with_the_rounded_reference():
    # The program fuzzer's bfloat16 convolution element (2026-11-29): terms 2**-126 * 2.46875,
    # 0 * 1.5, -1.5 * -9.9375, 0 * -0.75. The exact sum (Fraction) is 14.90625 + 2.9e-38: just
    # above the midpoint of the bfloat16 values 14.875 and 14.9375, so correctly rounded 14.9375;
    # accumulated in float32 the tiny term is lost and the tie rounds to even, 14.875.
    from fractions import Fraction
    terms = [(2.0 ** -126, 2.46875), (0.0, 1.5), (-1.5, -9.9375), (0.0, -0.75)]
    exact = sum(Fraction(a) * Fraction(b) for a, b in terms)
    assert Fraction(14.90625) < exact < Fraction(14.90625) + Fraction(2) ** -120
    ref = np.array([14.9375], D.bfloat16)
    f32_sum = np.float32(0)
    for a, b in terms:
        f32_sum = np.float32(f32_sum + np.float32(a) * np.float32(b))
    backend = np.array([f32_sum], D.bfloat16)
    assert float(backend[0]) == 14.875
    S = np.array([sum(abs(a * b) for a, b in terms)])
    assert checks.check(C.dot_product(4), ref, backend, bound=S).passed
    # one more bfloat16 ulp down is no rounding of any sum within the bound
    assert not checks.check(C.dot_product(4), ref, np.array([14.8125], D.bfloat16), bound=S).passed
    # the midpoint must be a value the sum can have: with sum|a||b| below it, 14.875 is out
    assert not checks.check(C.dot_product(4), ref, backend, bound=np.array([14.9])).passed
