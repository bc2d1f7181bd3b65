"""dot_general, ragged_dot_general, conv_general_dilated, fft.

Float results are checked bitwise against an independent exact oracle (np.einsum over Python
Fractions, then the nearest value of the output dtype) and XLA:CPU within the dot-product bound
|xla - ref| <= (K + 2) u_out sum_k |a_k b_k| + K tiny (XLA accumulates in the output type and
flushes subnormals). Integer, bool and integer-valued float programs (every partial sum exact)
are compared bitwise with XLA:CPU: that checks every dimension-number, stride, padding, dilation
and group configuration exactly.
"""
from __future__ import annotations

import string
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, target
from jax import lax

from conformance.values import arrays
from interp import dtypes as D
import interp
from tests.support import with_params, x64, xla_cpu
from tests.test_lax_reductions import assert_same_bits, nearest, ref

BF16 = np.dtype(ml_dtypes.bfloat16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def to_frac(x):
    x = np.asarray(x)
    return np.vectorize(lambda v: Fraction(float(v)), otypes=[object])(x.astype(np.float64))


def einsum_spec(lhs_ndim, rhs_ndim, dimension_numbers):
    """The einsum string of a dot_general (output: batch, lhs free, rhs free)."""
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_letters)
    lhs = [next(letters) for _ in range(lhs_ndim)]
    rhs = [None] * rhs_ndim
    for a, b in zip(lc, rc):
        rhs[b] = lhs[a]
    for a, b in zip(lb, rb):
        rhs[b] = lhs[a]
    rhs = [r or next(letters) for r in rhs]
    out = [lhs[d] for d in lb] + [lhs[d] for d in range(lhs_ndim) if d not in lc and d not in lb] + \
        [rhs[d] for d in range(rhs_ndim) if d not in rc and d not in rb]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def exact_dot_general(a, b, dn):
    return np.einsum(einsum_spec(a.ndim, b.ndim, dn), to_frac(a), to_frac(b))


def abs_dot_general(a, b, dn):
    return np.einsum(einsum_spec(a.ndim, b.ndim, dn), np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))


def check_oracle(out, exact, dtype):
    out = np.asarray(out)
    exact = np.asarray(exact, dtype=object).reshape(out.shape)
    for i in np.ndindex(out.shape):
        assert_same_bits(out[i], nearest(exact[i], dtype), err_msg=f"at {i}")


def check_xla_bound(xla, out, absdot, k, dtype):
    fi = D.finfo(dtype)
    bound = (k + 2) * float(fi.eps) / 2 * absdot + k * float(fi.tiny)
    err = np.abs(np.asarray(xla, np.float64) - np.asarray(out, np.float64))
    assert np.all(err <= bound), f"max error {err.max()} vs bound at {np.argmax(err - bound)}"


DOT_CONFIGS = [
    # lhs shape, rhs shape, ((lhs contracting, rhs contracting), (lhs batch, rhs batch))
    ((4, 6), (6, 5), (((1,), (0,)), ((), ()))),            # matmul
    ((6, 4), (5, 6), (((0,), (1,)), ((), ()))),            # both transposed
    ((7,), (7,), (((0,), (0,)), ((), ()))),                # vector dot
    ((3,), (4,), (((), ()), ((), ()))),                    # outer product (K = 1)
    ((2, 3, 4), (4, 3, 5), (((1, 2), (1, 0)), ((), ()))),  # two contracting dims
    ((3, 4, 5), (3, 5, 2), (((2,), (1,)), ((0,), (0,)))),  # batch first
    ((4, 2, 5), (5, 6, 2), (((2,), (0,)), ((1,), (2,)))),  # batch in the middle / last
    ((2, 3, 4), (3, 2, 4), (((), ()), ((0, 1), (1, 0)))),  # batch only (no contraction)
    ((2, 0, 3), (3, 4), (((2,), (0,)), ((), ()))),         # empty free dimension
    ((2, 3), (0, 3), (((), ()), ((), ()))),                # empty rhs
    ((3, 0), (0, 2), (((1,), (0,)), ((), ()))),            # K = 0: zeros
]


@pytest.mark.parametrize("lshape,rshape,dn", DOT_CONFIGS, ids=lambda v: str(v).replace(" ", ""))
def test_dot_general_configs(lshape, rshape, dn):
    rng = np.random.default_rng(len(lshape) * 7 + sum(lshape))
    a = (rng.standard_normal(lshape) * np.ldexp(1.0, rng.integers(-20, 20, lshape))).astype(np.float32)
    b = (rng.standard_normal(rshape) * np.ldexp(1.0, rng.integers(-20, 20, rshape))).astype(np.float32)
    fn = lambda a, b: lax.dot_general(a, b, dn)  # noqa: E731
    out = ref(fn, a, b)
    xla = xla_cpu(fn, a, b)
    assert out.shape == xla.shape and out.dtype == xla.dtype
    check_oracle(out, exact_dot_general(a, b, dn), F32)
    k = int(np.prod([lshape[d] for d in dn[0][0]]))
    check_xla_bound(xla, out, abs_dot_general(a, b, dn), k, F32)
    ai, bi = np.round(a).clip(-8, 8), np.round(b).clip(-8, 8)   # integer-valued: XLA exact too
    assert_same_bits(ref(fn, ai, bi), xla_cpu(fn, ai, bi))


def test_dot_zero_signs():
    """An exact zero is +0.0, except a single product (K == 1), whose sign XLA keeps."""
    for k in (1, 2, 5):
        a = np.full((2, k), -0.0, np.float32)
        b = np.ones((k, 3), np.float32)
        assert_same_bits(ref(lambda a, b: a @ b, a, b), xla_cpu(lambda a, b: a @ b, a, b), err_msg=f"K={k}")
        x = np.full((2, k), -0.0, np.float32)
        fns = (lambda x: lax.reduce(x, np.float32(0), lax.add, (1,)), lambda x: lax.cumsum(x, 1),
               lambda x: lax.reduce_window(x, np.float32(0), lax.add, (1, k), (1, 1), "VALID"))
        for fn in fns:
            assert_same_bits(ref(fn, x), xla_cpu(fn, x), err_msg=f"K={k}")


def _matmul(a, b):
    return lax.dot_general(a, b, (((1,), (0,)), ((), ())))


def _ieee_dot(a_row, b_col):
    """IEEE value of a dot product with inf/NaN terms (None when every product is finite)."""
    with np.errstate(invalid="ignore"):
        p = a_row.astype(np.float64) * b_col.astype(np.float64)
    if np.all(np.isfinite(p)):
        return None
    if np.isnan(p).any() or (np.isposinf(p).any() and np.isneginf(p).any()):
        return np.nan
    return np.inf if np.isposinf(p).any() else -np.inf


@pytest.mark.parametrize("dtype", [F32, BF16, np.dtype(np.float16)], ids=str)
@settings(max_examples=10)
@given(data=st.data())
def test_dot_hypothesis_specials(dtype, data):
    """Random inputs mixing NaN, +-inf, +-0, subnormals and extremes: every element equals the
    oracle (finite products) or the IEEE special value."""
    a = data.draw(arrays(dtype, (3, 5)))
    b = data.draw(arrays(dtype, (5, 2)))
    out = ref(_matmul, a, b)
    exact = exact_dot_general(np.nan_to_num(a.astype(np.float64), posinf=0, neginf=0),
                              np.nan_to_num(b.astype(np.float64), posinf=0, neginf=0), (((1,), (0,)), ((), ())))
    for i in range(3):
        for j in range(2):
            special = _ieee_dot(a[i], b[:, j])
            want = nearest(exact[i, j], dtype) if special is None else np.array(special).astype(dtype)
            assert_same_bits(out[i, j], want, err_msg=f"{a[i]} . {b[:, j]}")


def test_dot_hard_rounding_cases():
    """Ties and near-ties that a float64 sum alone would misround, and cancellation."""
    cases = [([1.0, 2 ** -24], [1.0, 1.0]), ([1.0, 2 ** -24, 2 ** -40], [1.0, 1.0, 2 ** -31]),
             ([1.0, 2 ** -24, -(2 ** -40)], [1.0, 1.0, 2 ** -31]),
             ([2 ** 40, 3.0, -(2 ** 40)], [2 ** 40, 1.0, 2 ** 40]), ([1e-30, 3e-8], [1e-20, 1e-38]),
             ([-0.0, 1.0], [1.0, -0.0]), ([3e38, 3e38, -3e38], [1.0, 1.0, 1.0])]
    for a, b in cases:
        a, b = np.array([a], np.float32), np.array(b, np.float32)
        out = ref(lambda a, b: a @ b, a, b)
        check_oracle(out, exact_dot_general(a, b, (((1,), (0,)), ((), ()))), F32)


def test_dot_random_large_k_against_oracle():
    """K = 300 with cancellation: many elements need the refinement tiers; all exact."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 300)).astype(np.float32)
    b = np.concatenate([a[:2].T, -a[:2].T * np.float32(1 + 2 ** -20)], axis=1).astype(np.float32)
    out = ref(lambda a, b: a @ b, a, b)
    check_oracle(out, exact_dot_general(a, b, (((1,), (0,)), ((), ()))), F32)


def _near_tie_operands(m, n, extra, seed):
    """float32 (m, K) x (K, n) whose exact products are float32 ties (odd integers in
    [2**24, 2**25)) plus 0 or +-2**-40: below float64's resolution there, so the BLAS sum sits
    exactly on the midpoint and only the refinement tiers can tell the direction (the exact ties
    go to the exact tier). ``extra`` pairs of columns add integer products that cancel exactly."""
    rng = np.random.default_rng(seed)
    x = 2.0 ** 24 + 2 * rng.integers(0, 2 ** 22, m)
    y = 2 * rng.integers(0, 2 ** 10, n) + 1.0
    e = rng.choice([0.0, 2.0 ** -20, -(2.0 ** -20)], m)
    f = rng.choice([0.0, 2.0 ** -20, -(2.0 ** -20)], n)
    v = rng.integers(-2 ** 10, 2 ** 10, (m, extra)).astype(np.float64)
    w = rng.integers(-2 ** 10, 2 ** 10, (extra, n)).astype(np.float64)
    a = np.concatenate([x[:, None], np.ones((m, 1)), e[:, None], v, -v], axis=1).astype(np.float32)
    b = np.concatenate([np.ones((1, n)), y[None], f[None], w, w], axis=0).astype(np.float32)
    return a, b


@pytest.mark.parametrize("m,n,extra", [(2, 3, 2), (12, 10, 30)], ids=["direct", "blocked"])
def test_dot_undecided_elements_refined_exactly(m, n, extra, monkeypatch):
    """The float32 fast path (interp/rules/lax_contractions.py _certify_rank1): elements its
    bracket cannot decide go to math.fsum where they hold few terms in all (FSUM_TERMS), else to
    the refinement tiers (first the sqrt(k) chunked sums) and exact ties to the exact tier;
    every element equals the Fraction oracle."""
    from interp.rules import lax_contractions as C
    from interp import numerics
    calls = {"blocked": 0, "exact": 0, "fsum": 0}

    def spy(name, fn):
        def wrapped(*args, **kw):
            calls[name] += 1
            return fn(*args, **kw)
        return wrapped
    monkeypatch.setattr(C, "_blocked_dots", spy("blocked", C._blocked_dots))
    monkeypatch.setattr(numerics, "exact_dot", spy("exact", numerics.exact_dot))
    monkeypatch.setattr(C, "fsum_round", spy("fsum", C.fsum_round))
    a, b = _near_tie_operands(m, n, extra, seed=m)
    out = ref(lambda a, b: a @ b, a, b)
    check_oracle(out, exact_dot_general(a, b, (((1,), (0,)), ((), ()))), F32)
    few = m * n * a.shape[1] <= C.FSUM_TERMS
    assert calls["fsum"] > 0 if few else (calls["exact"] > 0 and calls["blocked"] > 0)
    assert len(set(np.asarray(out, np.float64).ravel() % 2)) == 1   # every result rounded to even
    # Batched (two problems; the second one's operands transposed in memory).
    a2, b2 = _near_tie_operands(m, n, extra, seed=m + 1)
    dn = (((2,), (1,)), ((0,), (0,)))
    la, rb = np.stack([a, a2]), np.stack([b, np.asfortranarray(b2)])
    check_oracle(ref(lambda x, y: lax.dot_general(x, y, dn), la, rb), exact_dot_general(la, rb, dn), F32)


@pytest.mark.parametrize("pref", [None, jnp.float32], ids=["f16", "f16_to_f32"])
def test_dot_narrow_inputs_exact_sums(pref, monkeypatch):
    """float16 inputs (interp/rules/lax_contractions.py _summed_exactly): their float64 BLAS sums
    are often exact and then often rounding ties of the output dtype, which no error bound
    decides; those are taken as exact (every partial sum a float64 number) without the exact
    tier. Rows of one scale (exact sums, cancellations to +0) and rows 2**-24 .. 2**15 wide
    (sums BLAS rounds: the other tiers), every element against the Fraction oracle."""
    from interp.rules import lax_contractions as C
    from interp import numerics
    calls = {"exact": 0, "summed_exactly": 0}

    def spy(name, fn):
        def wrapped(*args, **kw):
            out = fn(*args, **kw)
            calls[name] += int(np.sum(out)) if name == "summed_exactly" else 1
            return out
        return wrapped
    monkeypatch.setattr(numerics, "exact_dot", spy("exact", numerics.exact_dot))
    monkeypatch.setattr(C, "_summed_exactly", spy("summed_exactly", C._summed_exactly))
    rng = np.random.default_rng(24)
    a = rng.standard_normal((24, 32)).astype(np.float16)
    b = rng.standard_normal((32, 20)).astype(np.float16)
    a[3, 16:] = -a[3, :16]                               # row 3 . (b's columns of equal halves): 0
    b[16:, :4] = b[:16, :4]
    out_dtype = np.dtype(pref or np.float16)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=pref)  # noqa: E731
    out = ref(fn, a, b)
    check_oracle(out, exact_dot_general(a, b, (((1,), (0,)), ((), ()))), out_dtype)
    assert calls["summed_exactly"] > 0 and calls["exact"] == 0
    assert_same_bits(np.asarray(out)[3, :4], np.zeros(4, out_dtype))          # exact zeros: +0
    # Each row 2**-24 .. 2**15 wide: the sums are not multiples of one float64-sized unit.
    wide = (rng.standard_normal((6, 32)) * np.ldexp(1.0, rng.integers(-24, 15, (6, 32)))).astype(np.float16)
    wide[:, 0] = np.float16(2.0 ** -24)
    tie = np.concatenate([a[:6, :31], np.full((6, 1), np.float16(2.0 ** -24))], axis=1)
    for lhs in (wide, tie):
        check_oracle(ref(fn, lhs, b), exact_dot_general(lhs, b, (((1,), (0,)), ((), ()))), out_dtype)


def test_dot_float32_norm_bound_extremes():
    """The fast path bounds row/column norms in float32: rows of subnormals (their squares
    underflow to 0), values whose squares overflow float32 (the float64 norms take over) and
    ordinary rows, all against the Fraction oracle."""
    rng = np.random.default_rng(12)
    sub = np.float32(2.0 ** -149) * rng.integers(-9, 9, (2, 40)).astype(np.float32)
    a = np.concatenate([sub, rng.standard_normal((2, 40)).astype(np.float32) * np.float32(1e-30),
                        rng.standard_normal((2, 40)).astype(np.float32) * np.float32(1e20),
                        rng.standard_normal((2, 40)).astype(np.float32)]).astype(np.float32)
    b = np.concatenate([rng.standard_normal((40, 3)), rng.integers(-3, 3, (40, 2)) * 2.0 ** 100], axis=1).astype(np.float32)
    for lhs in (a, a[:2], a[:6:2]):
        out = ref(lambda a, b: a @ b, lhs, b)
        check_oracle(out, exact_dot_general(lhs, b, (((1,), (0,)), ((), ()))), F32)


def test_blocked_dots_bound_holds():
    """_blocked_dots' contract against exact sums: |sums - exact| <= bound, with heavy cancellation
    and magnitudes 2**+-30 apart, for k that are and are not multiples of the chunk length; and
    the bound ~sqrt(k)/2 times below BLAS's gamma_k."""
    from interp.rules import lax_contractions as C
    rng = np.random.default_rng(11)
    for k in (200, 256):
        a = (rng.standard_normal((2, 6, k)) * np.ldexp(1.0, rng.integers(-30, 30, (2, 6, k)))).astype(np.float32)
        b = np.concatenate([a.transpose(0, 2, 1), -a.transpose(0, 2, 1) * np.float32(1 + 2 ** -20)], axis=2)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        bi, mi, ni = np.repeat([0, 1], 24), np.tile(np.repeat(np.arange(6), 4), 2), np.tile(np.arange(12)[::3], 12)
        absbound = np.einsum("tk,tk->t", np.abs(af[bi, mi]), np.abs(bf[bi, :, ni])) * (1 + 2 ** -40)
        sums, bound = C._blocked_dots(af, bf, bi, mi, ni, absbound)
        for t in range(bi.size):
            exact = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(af[bi[t], mi[t]], bf[bi[t], :, ni[t]]))
            assert abs(Fraction(float(sums[t])) - exact) <= Fraction(float(bound[t])), (k, t)
        assert np.all(bound <= absbound * (k * 2.0 ** -53) / 4)


@pytest.mark.parametrize("dtypes", [(np.int8, None), (np.int8, np.int32), (np.uint8, np.uint32),
                                    (np.int32, None), (np.uint16, np.int32), (np.int8, np.float32)],
                         ids=str)
def test_dot_integer_wraparound_bitwise(dtypes):
    """Integer results wrap; int8 inputs with a float32 result: every partial sum is exact."""
    dt, pref = dtypes
    info = np.iinfo(dt)
    rng = np.random.default_rng(0)
    a = rng.integers(info.min, info.max, (3, 9), endpoint=True).astype(dt)
    b = rng.integers(info.min, info.max, (9, 4), endpoint=True).astype(dt)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=pref)  # noqa: E731
    assert_same_bits(ref(fn, a, b), xla_cpu(fn, a, b))


@pytest.mark.parametrize("k,top", [(7, 2 ** 25), (9, 2 ** 25), (1024, 100)],
                         ids=["below_2_53", "above_2_53", "peer_suite_1024"])
def test_dot_integer_sums_exact_on_either_side_of_the_float64_path(k, top):
    """int32 dots whose partial sums stay below 2**53 go through float64 BLAS (exact in any
    order), others through integer arithmetic: both bit-exact with XLA:CPU, wrapping included
    (7 * 2**50 < 2**53 <= 9 * 2**50; 1024 x 100 x 100, JAX's peer-suite kernel)."""
    rng = np.random.default_rng(k)
    a = rng.integers(-top, top, (5, k), endpoint=True).astype(np.int32)
    b = rng.integers(-top, top, (k, 6), endpoint=True).astype(np.int32)
    a[0], b[:, 0] = top, top          # the largest sum, K * top**2, wraps in int32
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())))  # noqa: E731
    assert_same_bits(ref(fn, a, b), xla_cpu(fn, a, b))


def test_dot_bool_and_int64():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 2, (3, 5)).astype(bool), rng.integers(0, 2, (5, 4)).astype(bool)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())))  # noqa: E731
    assert_same_bits(ref(fn, a, b), xla_cpu(fn, a, b))
    with x64():
        a = np.array([[2 ** 62, 3], [-(2 ** 63), 1]], np.int64)
        b = np.array([[4, 1], [5, -7]], np.int64)
        assert_same_bits(ref(fn, a, b), xla_cpu(fn, a, b))


def test_float64_refinement_tiers():
    """float64 dots/sums with heavy cancellation: long double cannot decide most elements, the
    double-double tier (and the exact fallback) must; every element against the exact oracle."""
    rng = np.random.default_rng(8)
    with x64():
        a = rng.standard_normal((3, 200)) * np.ldexp(1.0, rng.integers(-30, 30, (3, 200)))
        b = np.concatenate([a[:2].T, -a[:2].T * (1 + 2.0 ** -40), a[2:].T * 2.0 ** -600], axis=1)
        out = ref(lambda a, b: a @ b, a, b)
        check_oracle(out, to_frac(a) @ to_frac(b), F64)
        # Products 2**2000 apart (the double-double tier drops the tiny ones into its bound).
        wide_a = np.array([[2.0 ** 500, 1.0, -(2.0 ** 500), 2.0 ** -600, 3.0], [1.0, 2.0 ** -1000, -1.0, 2.0 ** -60, 0.0]])
        wide_b = np.array([[2.0 ** 500, 2.0 ** 500], [2.0 ** -1000, -(2.0 ** -1000)], [2.0 ** 500, 2.0 ** 500],
                           [2.0 ** -470, 2.0 ** -474], [2.0 ** -1070, -(2.0 ** -1073)]])
        out = ref(lambda a, b: a @ b, wide_a, wide_b)
        check_oracle(out, to_frac(wide_a) @ to_frac(wide_b), F64)
        x = np.concatenate([a, -a * (1 + 2.0 ** -45)], axis=1)
        out = ref(lambda x: lax.reduce(x, 0.0, lax.add, (1,)), x)
        check_oracle(out, np.array([np.sum(to_frac(r)) for r in x], object), F64)


def test_float64_sliced_products():
    """float64 dots through exact slice products (the Ozaki scheme) and the pair rounding:
    exact ties (integer data whose sums sit on a float64 midpoint), cancellation to exact zero
    (+0), a -0.0 row, rows 2**-300 apart, inf/NaN rows, and a float32 result from float64 inputs;
    every element against the exact oracle."""
    from interp.rules import lax_contractions as C
    rng = np.random.default_rng(17)
    big = float(2 ** 53)
    a = np.array([[big, 1.0, 0.0], [big + 2, 1.0, 1.0], [3.0, -3.0, 0.0], [-0.0, -0.0, -0.0],
                  [1.0, 2.0 ** -300, 3.0], [np.inf, 1.0, 0.0], [np.nan, 0.0, 0.0]])
    b = np.array([[1.0, 1.0, -1.0], [1.0, 3.0, 1.0], [1.0, 1.0, 0.5]])
    x = rng.standard_normal((5, 700)) * np.ldexp(1.0, rng.integers(-40, 40, (5, 700)))
    y = np.concatenate([x[:3].T, -x[:3].T * (1 + 2.0 ** -45), rng.standard_normal((700, 2))], axis=1)
    with x64():
        for lhs, rhs in ((a, b), (x, y)):
            finite = np.isfinite(lhs).all(axis=1)
            assert C._sliced_matmul(lhs[None], rhs[None], False) is not None   # the sliced path
            out = interp.interpret(lambda a, b: a @ b)(lhs, rhs)
            check_oracle(out[finite], to_frac(lhs[finite]) @ to_frac(rhs), F64)
            f32 = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                               preferred_element_type=jnp.float32)
            check_oracle(interp.interpret(f32)(lhs, rhs)[finite], to_frac(lhs[finite]) @ to_frac(rhs), F32)
        out = interp.interpret(lambda a, b: a @ b)(a, b)
        assert_same_bits(out[~np.isfinite(a).all(axis=1)], xla_cpu(lambda a, b: a @ b, a, b)[5:])
        assert_same_bits(out[3], np.zeros(3))        # -0.0 . b sums to +0.0


def test_dot_mixed_and_narrow_inputs():
    rng = np.random.default_rng(2)
    a32 = rng.standard_normal((3, 8)).astype(np.float32)
    b16 = rng.standard_normal((8, 2)).astype(BF16)
    # Mixed input dtypes: converted to the output dtype (f32) first, as the CPU lowering does.
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)  # noqa: E731
    out = ref(fn, a32, b16)
    check_oracle(out, exact_dot_general(a32, b16.astype(np.float32), (((1,), (0,)), ((), ()))), F32)
    # bf16 x bf16 accumulated exactly, rounded once to f32 (preferred) or bf16 (default).
    a16 = a32.astype(BF16)
    check_oracle(ref(fn, a16, b16), exact_dot_general(a16, b16, (((1,), (0,)), ((), ()))), F32)
    fn16 = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())))  # noqa: E731
    check_oracle(ref(fn16, a16, b16), exact_dot_general(a16, b16, (((1,), (0,)), ((), ()))), BF16)
    # float8 inputs of two kinds (kept as they are), f32 result.
    e4 = a32.astype(ml_dtypes.float8_e4m3fn)
    e5 = np.asarray(b16, np.float32).astype(ml_dtypes.float8_e5m2)
    out = ref(fn, e4, e5)
    check_oracle(out, exact_dot_general(e4, e5, (((1,), (0,)), ((), ()))), F32)
    check_xla_bound(xla_cpu(fn, e4, e5), out, abs_dot_general(e4, e5, (((1,), (0,)), ((), ()))), 8, F32)


def test_dot_complex_and_float64():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 5)) + 1j * rng.standard_normal((2, 5))).astype(np.complex64)
    b = (rng.standard_normal((5, 3)) + 1j * rng.standard_normal((5, 3))).astype(np.complex64)
    out = ref(lambda a, b: a @ b, a, b)
    ar, ai, br, bi = (to_frac(v) for v in (a.real, a.imag, b.real, b.imag))
    check_oracle(out.real, ar @ br - ai @ bi, F32)
    check_oracle(out.imag, ar @ bi + ai @ br, F32)
    with x64():
        a = rng.standard_normal((3, 40)) * np.ldexp(1.0, rng.integers(-40, 40, (3, 40)))
        b = rng.standard_normal((40, 2))
        out = ref(lambda a, b: a @ b, a, b)
        check_oracle(out, to_frac(a) @ to_frac(b), F64)


def test_dot_nonfinite():
    a = np.array([[1.0, np.inf, 2.0], [0.0, 1.0, 1.0], [np.nan, 0.0, 0.0], [1.0, 2.0, 3.0]], np.float32)
    b = np.array([[1.0, 0.0, -np.inf], [2.0, 1.0, 1.0], [3.0, 1.0, np.inf]], np.float32)
    out = ref(lambda a, b: a @ b, a, b)
    assert_same_bits(out, xla_cpu(lambda a, b: a @ b, a, b))
    # Independent statement: inf * 0 -> NaN; +inf meeting -inf -> NaN; one infinity -> it.
    want = np.array([[np.inf, np.inf, np.nan], [5.0, 2.0, np.nan], [np.nan] * 3, [14.0, 5.0, np.nan]], np.float32)
    assert_same_bits(out, want)


def test_dot_precision_hints():
    a = np.ones((2, 3), np.float32)
    for p in (lax.Precision.HIGHEST, (lax.Precision.DEFAULT, lax.Precision.HIGH)):
        fn = lambda a: lax.dot_general(a, a.T, (((1,), (0,)), ((), ())), precision=p)  # noqa: E731
        assert_same_bits(ref(fn, a), xla_cpu(fn, a))


# ---------------------------------------------------------------- explicit dot algorithms

PRESETS = [m for m in lax.DotAlgorithmPreset if m.name != "DEFAULT"]
# What XLA:CPU compiles (jax/_src/lax/lax.py _handle_dot_precision); it ignores the input
# rounding of the BF16 ones (spec/lax_contractions.py BACKEND_PROPERTIES).
CPU_PRESETS = ("F16_F16_F16", "F32_F32_F32", "F64_F64_F64", "BF16_BF16_F32", "BF16_BF16_F32_X3",
               "BF16_BF16_F32_X6")
_STORAGE = {"F16": np.float16, "BF16": BF16, "TF32": np.float32, "F32": np.float32, "F64": np.float64}
_RESULT = {"F16": np.float16, "BF16": BF16, "F32": np.float32, "F64": np.float64}
_PAIRS = {"X3": [(0, 0), (0, 1), (1, 0)], "X6": [(0, 0), (0, 1), (1, 0), (0, 2), (2, 0), (1, 1)],
          "X9": [(i, j) for i in range(3) for j in range(3)]}


def _tf32(x):
    """Round-to-nearest-even of a float32 to 10 mantissa bits, by XLA:CPU's reduce_precision
    (normal values only: XLA:CPU flushes subnormals)."""
    return xla_cpu(lambda v: lax.reduce_precision(v, exponent_bits=8, mantissa_bits=10), x)


def _preset_oracle(name, a, b, out_dtype):
    """The definition in spec/lax_contractions.py, written independently: input conversion,
    input rounding / component split in float32, exact sum of the listed products (Fractions),
    one rounding to the accumulation type, conversion to the result and output dtypes."""
    parts = name.split("_")
    storage = np.dtype(_STORAGE[parts[0]])
    acc = np.dtype(_RESULT[parts[2]])
    split = parts[3] if len(parts) > 3 else None
    if split:
        storage = F32            # the split algorithms take float32 inputs
    elif parts[0] == "BF16" and a.dtype in (np.dtype(np.float32), BF16):
        storage = a.dtype        # BF16 presets take float32 storage as it is
    a, b = (x.astype(storage) for x in (a, b))
    if parts[0] in ("BF16", "TF32"):
        rnd = _tf32 if parts[0] == "TF32" else (lambda v: v.astype(BF16).astype(np.float32))
        comps = []
        for x in (a.astype(np.float32), b.astype(np.float32)):
            cs, rest = [], x
            for _ in range(3 if split in ("X6", "X9") else 2 if split else 1):
                cs.append(rnd(rest))
                rest = rest - cs[-1]
            comps.append(cs)
        pairs = _PAIRS[split] if split else [(0, 0)]
        exact = sum(to_frac(comps[0][i]) @ to_frac(comps[1][j]) for i, j in pairs)
    else:
        exact = to_frac(a) @ to_frac(b)
    # (the dot's result type is the accumulation type or the output dtype: one conversion either way)
    vals = np.array([nearest(q, acc) for q in exact.ravel()]).reshape(exact.shape)
    return vals.astype(out_dtype)


@pytest.mark.parametrize("preset", [p for p in PRESETS if not p.name.startswith("ANY_F8")], ids=str)
@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16)], ids=str)
def test_dot_algorithm_presets_against_oracle(preset, dtype):
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((3, 40)) * np.ldexp(1.0, rng.integers(-6, 6, (3, 40)))).astype(dtype)
    b = (rng.standard_normal((40, 2)) * np.ldexp(1.0, rng.integers(-6, 6, (40, 2)))).astype(dtype)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=preset)  # noqa: E731
    with x64(preset.name == "F64_F64_F64"):
        out = interp.interpret(fn)(a, b)
    assert out.dtype == jax.eval_shape(fn, a, b).dtype
    assert_same_bits(out, _preset_oracle(preset.name, a, b, out.dtype), err_msg=preset.name)


def _kept(name):
    """(the component pairs a preset keeps, the number of components) from its name."""
    split = name.split("_")[3] if name.count("_") == 3 else None
    return (_PAIRS[split], 3 if split in ("X6", "X9") else 2) if split else ([(0, 0)], 1)


@pytest.mark.parametrize("name", CPU_PRESETS)
def test_dot_algorithm_presets_vs_xla_cpu(name):
    """XLA:CPU ignores the BF16 presets' rounding and splits (spec/lax_contractions.py
    BACKEND_PROPERTIES): their results are bitwise its F32_F32_F32 result, and the reference is
    within XLA's float32 dot bound plus what the preset drops of the exact product
    (split_truncation, derived) plus its own rounding; the other presets under DOT_PRODUCT;
    bitwise on integer-valued inputs (every sum exact)."""
    from conformance.checks import check
    from spec.compliance import dot_product
    from spec.lax_contractions import split_truncation
    preset = lax.DotAlgorithmPreset[name]
    dn = (((1,), (0,)), ((), ()))
    fn = lambda a, b: lax.dot_general(a, b, dn, precision=preset)  # noqa: E731
    as_f32 = lambda a, b: lax.dot_general(a, b, dn, precision=lax.DotAlgorithmPreset.F32_F32_F32)  # noqa: E731
    k, u = 96, 2.0 ** -24
    for seed in range(12, 18):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((4, k)).astype(np.float32)
        b = rng.standard_normal((k, 3)).astype(np.float32)
        bound = np.abs(a.astype(F64)) @ np.abs(b.astype(F64))
        with x64(name == "F64_F64_F64"):
            out, xla = interp.interpret(fn)(a, b), xla_cpu(fn, a, b)
            if name.startswith("BF16"):
                assert_same_bits(xla, xla_cpu(as_f32, a, b), err_msg=name)
                drop = split_truncation(*_kept(name), 2.0 ** -8)
                tol = (k * u / (1 - k * u) + drop + u * (1 + drop)) * bound
                assert np.all(np.abs(out.astype(F64) - xla) <= tol), (name, seed)
            else:
                c = check(dot_product(k), out, xla, bound=bound)
                assert c.passed, c
            ai, bi = np.round(a * 4).astype(np.float32), np.round(b * 4).astype(np.float32)
            assert_same_bits(interp.interpret(fn)(ai, bi), xla_cpu(fn, ai, bi))


_SPLIT_PRESETS = ("BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9", "TF32_TF32_F32_X3")


def _split_worst_case_floats(n):
    """float32 values in [2**-20, 2**21), among them the split's worst cases: a significand near
    1 (hi largest against x) whose low 16 bits lie near a bf16 tie (lo largest) and whose low 8
    bits lie near a tie of lo (the rest largest)."""
    top = st.one_of(st.just(0), st.integers(0, 127))
    low = st.one_of(st.integers(0, 0xFFFF), st.builds(int.__add__, st.sampled_from([0x7F80, 0x8080]), st.integers(-1, 1)))
    one = st.builds(lambda top, lo, e, s: s * np.ldexp(np.float64((1 << 23) | (top << 16) | lo), e - 23),
                    top, low, st.integers(-20, 20), st.sampled_from([-1.0, 1.0]))
    return st.lists(one, min_size=n, max_size=n).map(lambda v: np.array(v, np.float32))


@pytest.mark.parametrize("name", _SPLIT_PRESETS)
@given(data=st.data())
def test_split_truncation_bounds_the_split_presets(name, data):
    """spec/lax_contractions.py split_truncation against exact emulations: the preset's value (the
    test's own oracle, in Fractions) lies within split_truncation * sum|a||b| of the exact product,
    plus its one rounding to float32; the reference gives the oracle's bits. (Random inputs reach
    a fraction of the bound; test_split_x3_nearly_attains_its_bound_on_one_product shows it
    is nearly attained.)"""
    from spec.lax_contractions import split_truncation
    k = data.draw(st.integers(1, 6))
    a = data.draw(_split_worst_case_floats(k)).reshape(1, k)
    b = data.draw(_split_worst_case_floats(k)).reshape(k, 1)
    want = _preset_oracle(name, a, b, np.float32)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                      precision=lax.DotAlgorithmPreset[name])
    assert_same_bits(interp.interpret(fn)(a, b), want, err_msg=name)
    drop = split_truncation(*_kept(name), Fraction(1, 2 ** (11 if name.startswith("TF32") else 8)))
    exact, total = (to_frac(a) @ to_frac(b))[0, 0], (abs(to_frac(a)) @ abs(to_frac(b)))[0, 0]
    err = abs(Fraction(float(want[0, 0])) - exact) / total
    target(float(err / drop), label=name)   # steer the search towards the bound
    assert err <= drop + Fraction(1, 2 ** 24) * (1 + drop)


def test_split_x3_nearly_attains_its_bound_on_one_product():
    """A hand-computed x * x under BF16_BF16_F32_X3: x = 1 + e, e = 2**-8 - 2**-17 - 2**-23 splits
    into hi = 1, lo = 2**-8 - 2**-16 (e is below the midpoint of its bf16 neighbours), rest
    r = 2**-17 - 2**-23; X3 keeps hi*hi + 2 hi*lo = 1 + 2**-7 - 2**-15 (exact in float32) and drops
    2 r + lo**2 + 2 lo r + r**2, 0.65 of split_truncation * x**2. XLA:CPU returns the float32 x * x
    instead (its F32_F32_F32 result): the known divergence of pallas_triton's X3 dot on HLO interpret.
    (A diagonal 2 x 2 x 2 dot: XLA:CPU refuses X3 in a 1 x K x 1 one.)"""
    from spec.lax_contractions import split_truncation
    x = np.float32(1 + 2.0 ** -8 - 2.0 ** -17 - 2.0 ** -23)
    a = np.diag([x, x])
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                      precision=lax.DotAlgorithmPreset.BF16_BF16_F32_X3)
    assert_same_bits(interp.interpret(fn)(a, a), np.diag(np.full(2, 1 + 2.0 ** -7 - 2.0 ** -15, np.float32)))
    dropped = Fraction(float(x)) ** 2 - (1 + Fraction(2) ** -7 - Fraction(2) ** -15)
    lo, r = Fraction(2) ** -8 - Fraction(2) ** -16, Fraction(2) ** -17 - Fraction(2) ** -23
    assert dropped == 2 * r + lo ** 2 + 2 * lo * r + r ** 2
    assert 0.64 < dropped / (split_truncation(_PAIRS["X3"], 2, Fraction(1, 256)) * Fraction(float(x)) ** 2) < 0.66
    assert_same_bits(xla_cpu(fn, a, a), np.diag(np.full(2, x * x, np.float32)))


@pytest.mark.parametrize("name", ["BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6"])
def test_xla_cpu_elemental_vector_dot_algorithms(name):
    """A 1 x K x 1 dot is XLA:CPU's elemental emitter's, which refuses _X3/_X6 (jaxlib 0.10.2:
    BF16_BF16_F32 too) with INVALID_ARGUMENT and from jaxlib 0.11 rounds BF16_BF16_F32's inputs:
    the reference's value (spec/lax_contractions.py BACKEND_PROPERTIES dot-algorithm-input-rounding)."""
    from interp.coverage import jax_version
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                      precision=lax.DotAlgorithmPreset[name])
    rng = np.random.default_rng(19)
    a, b = rng.standard_normal((1, 96)).astype(np.float32), rng.standard_normal((96, 1)).astype(np.float32)
    if name != "BF16_BF16_F32" or jax_version() < (0, 11):
        with pytest.raises(Exception, match="INVALID_ARGUMENT: Algorithm not supported by the ElementalIrEmitter"):
            xla_cpu(fn, a, b)
        return
    assert_same_bits(xla_cpu(fn, a, b), interp.interpret(fn)(a, b))


def test_dot_algorithm_x3_x6_nonfinite():
    """The split algorithms' low components of inf/NaN are zero (XLA's ZeroNaNs): hi*hi alone
    decides, so inf stays inf (not inf - inf = NaN) and inf * 0 is NaN, as in an f32 dot."""
    a = np.array([[np.inf, 1.0], [np.inf, 2.0], [np.nan, 1.0], [1.5, 2.0]], np.float32)
    b = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    want = np.array([[np.inf, np.nan], [np.inf, np.nan], [np.nan, np.nan], [3.5, 2.0]], np.float32)
    for name in ("BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9", "TF32_TF32_F32_X3"):
        fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                          precision=lax.DotAlgorithmPreset[name])
        assert_same_bits(interp.interpret(fn)(a, b), want, err_msg=name)


def test_dot_algorithm_unsupported_fp8_presets_without_fp8_and_component_splits_raise():
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                      precision=lax.DotAlgorithmPreset.ANY_F8_ANY_F8_F32)
    with pytest.raises(ValueError, match=r"float8.*\(dot_algorithm/unsupported\)"):
        interp.interpret(fn)(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    alg3 = lax.DotAlgorithm(lhs_precision_type=np.float32, rhs_precision_type=np.float32,
                            accumulation_type=np.float32, lhs_component_count=2,
                            rhs_component_count=2, num_primitive_operations=3)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=alg3)  # noqa: E731
    x = np.ones((3, 20), np.float32)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="dot_algorithm/unsupported: .*component"):
        interp.interpret(fn)(x, x.T.copy())


def test_dot_int64_to_float_unsupported_raises():
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                      preferred_element_type=np.float64)
    with x64():
        a = np.arange(6, dtype=np.int64).reshape(2, 3)
        with pytest.raises(interp.UnsupportedPrimitiveError, match="dot/int64-to-float-unsupported"):
            interp.interpret(fn)(a, a.T.copy())


def test_dot_algorithm_fp8_and_custom():
    import interp
    rng = np.random.default_rng(13)
    a = rng.standard_normal((2, 16)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((16, 3)).astype(ml_dtypes.float8_e5m2)
    exact = to_frac(a) @ to_frac(b)
    for name, out_dtype in (("ANY_F8_ANY_F8_F32", F32), ("ANY_F8_ANY_F8_F32_FAST_ACCUM", F32),
                            ("ANY_F8_ANY_F8_ANY", BF16)):
        fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),  # noqa: E731
                                          precision=lax.DotAlgorithmPreset[name],
                                          preferred_element_type=out_dtype)
        out = interp.interpret(fn)(a, b)
        assert out.dtype == out_dtype
        check_oracle(out, exact, out_dtype)
    # A DotAlgorithm spelled out: f16 inputs, f32 accumulation.
    alg = lax.DotAlgorithm(lhs_precision_type=np.float16, rhs_precision_type=np.float16,
                           accumulation_type=np.float32)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=alg)  # noqa: E731
    out = interp.interpret(fn)(x, x.T.copy())
    x16 = x.astype(np.float16)
    check_oracle(out, to_frac(x16) @ to_frac(x16.T), F32)
    # conv_general_dilated: JAX lowers an algorithm as precision DEFAULT (no algorithm attribute),
    # so the inputs are not rounded to bf16: bitwise the plain convolution, and XLA:CPU's.
    conv = lambda l, r: lax.conv_general_dilated(l, r, (1,), "VALID",  # noqa: E731
                                                 precision=lax.DotAlgorithmPreset.BF16_BF16_F32)
    lhs, rhs = rng.integers(-300, 300, (2, 3, 9)).astype(np.float32), rng.integers(-300, 300, (4, 3, 2)).astype(np.float32)
    out = interp.interpret(conv)(lhs, rhs)
    assert_same_bits(out, xla_cpu(conv, lhs, rhs))
    assert_same_bits(out, interp.interpret(lambda l, r: lax.conv_general_dilated(l, r, (1,), "VALID"))(lhs, rhs))


# ---------------------------------------------------------------- ragged_dot

@pytest.mark.parametrize("sizes", [[2, 0, 3], [1, 1, 1], [5, 1, 1], [0, 0, 0]], ids=str)
def test_ragged_dot_noncontracting(sizes):
    rng = np.random.default_rng(5)
    x = rng.integers(-5, 5, (6, 4)).astype(np.float32)
    w = rng.integers(-5, 5, (3, 4, 2)).astype(np.float32)
    gs = np.array(sizes, np.int32)
    fn = lambda x, w, g: lax.ragged_dot(x, w, g)  # noqa: E731
    assert_same_bits(ref(fn, x, w, gs), xla_cpu(fn, x, w, gs))
    xf = rng.standard_normal((6, 4)).astype(np.float32)
    out = ref(fn, xf, w, gs)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for r in range(6):
        g = np.searchsorted(starts, r, side="right") - 1
        exact = to_frac(xf[r]) @ to_frac(w[g]) if g < 3 and r < starts[-1] else np.zeros(2, object)
        check_oracle(out[r], exact, F32)


def test_ragged_dot_contracting():
    from jax._src.lax.lax import RaggedDotDimensionNumbers
    rng = np.random.default_rng(6)
    x = rng.integers(-5, 5, (3, 7)).astype(np.float32)
    y = rng.integers(-5, 5, (7, 2)).astype(np.float32)
    gs = np.array([3, 0, 4], np.int32)
    rdn = RaggedDotDimensionNumbers(dot_dimension_numbers=(((1,), (0,)), ((), ())),
                                    lhs_ragged_dimensions=(1,), rhs_group_dimensions=())
    fn = lambda x, y, g: lax.ragged_dot_general(x, y, g, rdn)  # noqa: E731
    assert_same_bits(ref(fn, x, y, gs), xla_cpu(fn, x, y, gs))


RAGGED_CONFIGS = [
    # lhs shape, rhs shape, ((lc, rc), (lb, rb)), lhs ragged dim, rhs group dims, group_sizes shape
    ((2, 6, 4), (3, 2, 4, 5), (((2,), (2,)), ((0,), (1,))), 1, (0,), (3,)),       # batched, 1-D sizes
    ((2, 6, 4), (3, 2, 4, 5), (((2,), (2,)), ((0,), (1,))), 1, (0,), (2, 3)),     # sizes per batch
    ((6, 2, 4), (2, 4, 3, 5), (((2,), (1,)), ((1,), (0,))), 0, (2,), (2, 3)),     # batch not leading
    ((2, 3, 6, 4), (3, 4, 5), (((3,), (1,)), ((), ())), 2, (0,), (2, 3, 3)),      # sizes per free prefix
    ((2, 3, 7), (2, 7, 4), (((2,), (1,)), ((0,), (0,))), 2, (), (2, 3)),          # ragged contracting, batched
    ((2, 5, 7), (7, 3, 5), (((1, 2), (2, 0)), ((), ())), 2, (), (5, 3)),          # contracting prefix
    ((4, 3, 5), (4, 5, 2), (((2,), (1,)), ((0,), (0,))), 0, (), (4,)),            # ragged batch: plain dot
]


@pytest.mark.parametrize("config", RAGGED_CONFIGS, ids=lambda c: f"ragged{c[3]}-gs{c[5]}")
def test_ragged_dot_general_batched_modes(config):
    """Every ragged mode with batch dimensions and multi-dimensional group_sizes: bitwise against
    XLA:CPU (which runs JAX's dense formulation) on integer-valued inputs; random group sizes
    whose sums fall short of, or run past, the ragged dimension."""
    from jax._src.lax.lax import RaggedDotDimensionNumbers
    lshape, rshape, dn, ragged, gdims, gshape = config
    rng = np.random.default_rng(14)
    x = rng.integers(-6, 6, lshape).astype(np.float32)
    w = rng.integers(-6, 6, rshape).astype(np.float32)
    n = lshape[ragged]
    gs = rng.integers(0, n // 2 + 2, gshape).astype(np.int32)
    rdn = RaggedDotDimensionNumbers(dot_dimension_numbers=dn, lhs_ragged_dimensions=(ragged,),
                                    rhs_group_dimensions=gdims)
    fn = lambda x, w, g: lax.ragged_dot_general(x, w, g, rdn)  # noqa: E731
    assert_same_bits(interp.interpret(fn)(x, w, gs), xla_cpu(fn, x, w, gs))
    fn16 = lambda x, w, g: lax.ragged_dot_general(x, w, g, rdn, preferred_element_type=jnp.int32)  # noqa: E731
    xi, wi = x.astype(np.int8), w.astype(np.int8)
    assert_same_bits(interp.interpret(fn16)(xi, wi, gs), xla_cpu(fn16, xi, wi, gs))


def test_ragged_dot_general_by_hand_and_group_offset():
    """A batched ragged (non-contracting) dot with per-batch group sizes, by hand; group_offset
    has no semantics in JAX (its implementation raises; it cannot be traced)."""
    from jax._src.lax.lax import RaggedDotDimensionNumbers
    rng = np.random.default_rng(15)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)     # [g, b, k, n]
    gs = np.array([[2, 3], [4, 0]], np.int32)                    # [b, g]
    rdn = RaggedDotDimensionNumbers(dot_dimension_numbers=(((2,), (2,)), ((0,), (1,))),
                                    lhs_ragged_dimensions=(1,), rhs_group_dimensions=(0,))
    fn = lambda x, w, g: lax.ragged_dot_general(x, w, g, rdn)  # noqa: E731
    out = interp.interpret(fn)(x, w, gs)
    for b in range(2):
        starts = np.concatenate([[0], np.cumsum(gs[b])])
        for r in range(5):
            g = np.searchsorted(starts, r, side="right") - 1
            exact = to_frac(x[b, r]) @ to_frac(w[g, b]) if r < starts[-1] else np.zeros(4, object)
            check_oracle(out[b, r], exact, F32)
    # group_offset cannot even be bound by a traced program (an array parameter is unhashable):
    # the reference traces with JAX and fails the same way.
    fn = lambda x, w, g, o: lax.ragged_dot_general(x, w, g, rdn, group_offset=o)  # noqa: E731
    with pytest.raises(TypeError, match="group_offset"):
        interp.interpret(fn)(x, w, gs, np.array([1], np.int32))


def test_ragged_dot_general_c5_group_offset_raises():
    # A traced program cannot hold an array group_offset (above): a traced equation is given one.
    from jax._src.lax.lax import RaggedDotDimensionNumbers
    x, w, gs = np.ones((5, 3), np.float32), np.ones((2, 3, 4), np.float32), np.array([2, 3], np.int32)
    rdn = RaggedDotDimensionNumbers(dot_dimension_numbers=(((1,), (1,)), ((), ())),
                                    lhs_ragged_dimensions=(0,), rhs_group_dimensions=(0,))
    closed = jax.make_jaxpr(lambda x, w, g: lax.ragged_dot_general(x, w, g, rdn))(x, w, gs)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="ragged_dot_general/c5"):
        interp.eval_jaxpr(with_params(closed, "ragged_dot_general", group_offset=(1,)), x, w, gs)


def test_ragged_dot_with_algorithm():
    """The dense formulation passes precision to dot_general: an algorithm preset applies."""
    rng = np.random.default_rng(16)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w = rng.standard_normal((2, 8, 3)).astype(np.float32)
    gs = np.array([4, 2], np.int32)
    fn = lambda x, w, g: lax.ragged_dot(x, w, g, precision=lax.DotAlgorithmPreset.BF16_BF16_F32)  # noqa: E731
    out = interp.interpret(fn)(x, w, gs)
    xb, wb = x.astype(BF16), w.astype(BF16)
    for r in range(6):
        check_oracle(out[r], to_frac(xb[r]) @ to_frac(wb[0 if r < 4 else 1]), F32)


# ---------------------------------------------------------------- convolution

CONV_CONFIGS = [
    # lhs shape, rhs shape, dimension numbers, strides, padding, lhs_dilation, rhs_dilation, groups, batch groups
    ((2, 3, 7, 6), (4, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), "VALID", (1, 1), (1, 1), 1, 1),
    ((2, 7, 6, 3), (3, 2, 3, 4), ("NHWC", "HWIO", "NHWC"), (2, 1), "SAME", (1, 1), (1, 1), 1, 1),
    ((2, 4, 7, 6), (6, 2, 3, 2), ("NCHW", "OIHW", "NCHW"), (1, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), 2, 1),
    ((4, 3, 5, 6), (6, 3, 2, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), ((0, 1), (1, 0)), (1, 1), (2, 1), 1, 2),
    ((2, 6, 9), (3, 2, 4), ("NCH", "OIH", "NCH"), (2,), ((2, -1),), (1,), (1,), 3, 1),
    ((1, 2, 4, 5, 3), (2, 2, 2, 3, 2), ("NCDHW", "OIDHW", "NCDHW"), (1, 2, 1), ((1, 0), (0, 1), (2, 2)), (1, 1, 2),
     (1, 1, 1), 1, 1),
    ((3, 6, 2, 5), (2, 2, 2, 4), ("HWCN", "IHWO", "NWHC"), (1, 1), ((1, 1), (2, 0)), (2, 1), (1, 1), 1, 1),
    ((2, 1, 5), (3, 1, 1), ("NCH", "OIH", "NCH"), (1,), "VALID", (1,), (1,), 1, 1),   # K = 1
    ((2, 3, 8), (4, 3, 3), ("NCW", "OIW", "NWC"), (3,), ((-1, 2),), (2,), (3,), 1, 1),
]


def _conv_fn(dn, strides, padding, lhs_dil, rhs_dil, g, bg):
    return lambda l, r: lax.conv_general_dilated(l, r, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
                                                 dimension_numbers=dn, feature_group_count=g,
                                                 batch_group_count=bg)


@pytest.mark.parametrize("config", CONV_CONFIGS, ids=lambda c: f"{c[2][0]}-g{c[7]}-bg{c[8]}-{c[3]}")
def test_conv_configs(config):
    lshape, rshape, dn, strides, padding, lhs_dil, rhs_dil, g, bg = config
    fn = _conv_fn(dn, strides, padding, lhs_dil, rhs_dil, g, bg)
    rng = np.random.default_rng(sum(lshape))
    li = rng.integers(-4, 5, lshape).astype(np.float32)
    ri = rng.integers(-4, 5, rshape).astype(np.float32)
    assert_same_bits(ref(fn, li, ri), xla_cpu(fn, li, ri))   # integer-valued: exact on both sides
    lf = (rng.standard_normal(lshape) * np.ldexp(1.0, rng.integers(-10, 10, lshape))).astype(np.float32)
    rf = rng.standard_normal(rshape).astype(np.float32)
    out = ref(fn, lf, rf)
    with x64():
        absconv = np.asarray(jax.jit(fn)(np.abs(lf).astype(np.float64), np.abs(rf).astype(np.float64)))
    k = int(np.prod(rshape)) // (rshape[dn[1].index("O")])
    check_xla_bound(xla_cpu(fn, lf, rf), out, absconv, k, F32)


def test_conv_general_dilated_c4_both_group_counts_raise():
    conv = lambda l, r: lax.conv_general_dilated(l, r, (1,), "VALID", feature_group_count=2,  # noqa: E731
                                                 batch_group_count=2)
    lhs, rhs = np.ones((4, 4, 5), np.float32), np.ones((4, 2, 2), np.float32)
    with pytest.raises(ValueError, match="At most one"):       # JAX's shape rule, when tracing
        interp.interpret(conv)(lhs, rhs)
    # the rule's own check, on a traced equation given both counts
    closed = jax.make_jaxpr(lambda l, r: lax.conv_general_dilated(l, r, (1,), "VALID",
                                                                  feature_group_count=2))(lhs, rhs)
    with pytest.raises(ValueError, match="conv_general_dilated/c4: At most one"):
        interp.eval_jaxpr(with_params(closed, "conv_general_dilated", batch_group_count=2), lhs, rhs)


def test_conv_correctly_rounded():
    """One configuration against the exact oracle (patch sums as Fractions, by direct loops)."""
    rng = np.random.default_rng(11)
    lhs = (rng.standard_normal((1, 2, 5, 4)) * 3).astype(np.float32)
    rhs = rng.standard_normal((3, 2, 2, 3)).astype(np.float32)
    fn = _conv_fn(("NCHW", "OIHW", "NCHW"), (1, 1), ((1, 0), (1, 1)), (1, 1), (1, 1), 1, 1)
    out = ref(fn, lhs, rhs)
    lp = np.pad(to_frac(lhs), ((0, 0), (0, 0), (1, 0), (1, 1)), constant_values=Fraction(0))
    rf = to_frac(rhs)
    exact = np.empty(out.shape, object)
    for o, y, x in np.ndindex(out.shape[1:]):
        exact[0, o, y, x] = np.sum(lp[0, :, y:y + 2, x:x + 3] * rf[o])
    check_oracle(out, exact, F32)


# ---------------------------------------------------------------- fft

def _dft(x: np.ndarray, inverse=False) -> np.ndarray:
    """Direct O(n^2) DFT along the last axis in long double (independent of pocketfft)."""
    n = x.shape[-1]
    k = np.arange(n)
    ang = (2 * np.pi * np.longdouble(1)) * ((np.outer(k, k) % n).astype(np.longdouble) / n)
    w = np.cos(ang) + (1j if inverse else -1j) * np.sin(ang)
    out = x.astype(np.clongdouble) @ w.T.astype(np.clongdouble)
    return out / n if inverse else out


def test_fft_all_types():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    c = (rng.standard_normal((3, 16)) + 1j * rng.standard_normal((3, 16))).astype(np.complex64)
    fns = {"fft": (jnp.fft.fft, c), "ifft": (jnp.fft.ifft, c), "rfft": (jnp.fft.rfft, x),
           "irfft": (lambda v: jnp.fft.irfft(v, 16), jnp.fft.rfft(x)),
           "fft2": (jnp.fft.fft2, c), "rfftn": (lambda v: jnp.fft.rfftn(v, axes=(0, 1)), x)}
    for name, (fn, arg) in fns.items():
        arg = np.asarray(arg)
        out, xla = ref(fn, arg), xla_cpu(fn, arg)
        assert out.dtype == xla.dtype and out.shape == xla.shape, name
        scale = np.sqrt(np.sum(np.abs(arg.astype(np.complex128)) ** 2))
        # XLA within c log2(n) eps |x|_2 (its own f32 FFT).
        assert np.max(np.abs(out - xla)) <= 8 * 4 * 2 ** -23 * scale, name
    # Against the direct DFT: the reference is within half an ulp plus pocketfft's float64 error.
    want = _dft(c.astype(np.complex128))
    got = ref(jnp.fft.fft, c)
    for part in (np.real, np.imag):
        w = part(want).astype(np.float64)
        err = np.abs(part(got).astype(np.float64) - w)
        assert np.all(err <= np.spacing(np.abs(part(got))) * 0.5 + 1e-13 * np.abs(c).sum())
    got = ref(lambda v: jnp.fft.ifft(v), c)
    assert np.allclose(got, _dft(c.astype(np.complex128), inverse=True).astype(np.complex64), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- grad / vmap

def test_grad_and_vmap_of_dot_and_conv():
    rng = np.random.default_rng(10)
    a = rng.integers(-3, 4, (3, 4)).astype(np.float32)
    b = rng.integers(-3, 4, (4, 5)).astype(np.float32)
    lhs = rng.integers(-3, 4, (2, 3, 6, 5)).astype(np.float32)
    rhs = rng.integers(-3, 4, (4, 3, 3, 2)).astype(np.float32)
    conv = _conv_fn(("NCHW", "OIHW", "NCHW"), (2, 1), ((1, 1), (0, 1)), (1, 1), (1, 2), 1, 1)
    gconv = _conv_fn(("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1), (1, 1), 3, 1)
    lg = rng.integers(-3, 4, (2, 5, 4, 6)).astype(np.float32)
    rg = rng.integers(-3, 4, (2, 3, 2, 6)).astype(np.float32)
    progs = [
        (jax.grad(lambda a, b: jnp.sum((a @ b) ** 2), argnums=(0, 1)), (a, b)),
        (jax.vmap(lambda r, b: r @ b, in_axes=(0, None)), (a, b)),
        (jax.vmap(jnp.dot, in_axes=(1, 1)), (a, a)),
        (jax.grad(lambda l, r: jnp.sum(conv(l, r) ** 2), argnums=(0, 1)), (lhs, rhs)),
        (jax.grad(lambda l, r: jnp.sum(gconv(l, r) * 1.5), argnums=(0, 1)), (lg, rg)),
        (jax.vmap(lambda l: conv(l[None], rhs)[0]), (lhs,)),
    ]
    for k, (fn, args) in enumerate(progs):
        got, want = ref(fn, *args), xla_cpu(fn, *args)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert_same_bits(g, w, err_msg=f"program {k}")


def test_dot_scratch_temporaries_never_leak():
    """The certified float32 dot keeps its float64 copies, BLAS product and bracket in per-thread
    scratch buffers (interp/rules/_scratch.py): a result must never share memory with them, so
    later dots (same or other shapes, other threads at the same time) leave it unchanged."""
    import threading
    rng = np.random.default_rng(5)
    pairs = [(rng.standard_normal((m, 24)).astype(np.float32), rng.standard_normal((24, n)).astype(np.float32))
             for m, n in ((16, 8), (16, 8), (40, 33), (3, 5))]
    f = interp.interpret(lambda a, b: a @ b)
    first = [f(a, b) for a, b in pairs]
    kept = [r.copy() for r in first]
    results = {}

    def work(t):
        results[t] = [np.asarray(f(a, b)) for a, b in pairs[::-1] * 3]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, k in zip(first, kept):
        assert_same_bits(r, k)
    assert not any(np.shares_memory(x, y) for i, x in enumerate(first) for y in first[i + 1:])
    for t in range(3):
        for r, (a, b) in zip(results[t], pairs[::-1] * 3):
            check_oracle(r, exact_dot_general(a, b, (((1,), (0,)), ((), ()))), F32)
    # The other exits of the path: float64 and bfloat16 results (the bracket's general rounding),
    # bfloat16 operands (copied into the float64 scratch), an empty result.
    a, b = pairs[2]
    dn = (((1,), (0,)), ((), ()))
    for lhs, rhs, out in ((a, b, np.float64), (a, b, ml_dtypes.bfloat16),
                          (a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), np.float32),
                          (a[:0], b, np.float32)):
        with x64():
            g = interp.interpret(lambda x, y: lax.dot_general(x, y, dn, preferred_element_type=out))
            r = g(lhs, rhs)
            kept = r.copy()
            g(rhs.T.copy(), lhs.T.copy())                  # another dot through the same slots
            f(*pairs[0])
        assert r.dtype == out
        assert_same_bits(r, kept)
        check_oracle(r, exact_dot_general(lhs, rhs, dn), out)
