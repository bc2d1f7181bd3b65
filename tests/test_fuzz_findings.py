"""The XLA:CPU differences the program fuzzer found (docs/findings.md, spec/divergences.py): each
entry's model recognises what XLA:CPU computes and nothing else, and the fuzzer's oracle reports
the reduced programs as those known divergences (or as passes, on a JAX where XLA computes the
IEEE result)."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

import interp
from interp import dtypes as D
from conformance.values import bits, normalize_nans
from conformance.fuzz import oracle, suite
from hardware_runners import get_runner
from conformance.fuzz.suite import Case
from spec import compliance as C
from conformance import divergence_models as DM
from spec import divergences as DV


def _failure(prim, inputs, ref, out, runner="xla:cpu", jax_version="0.12.0.1"):
    return DM.Failure(f"fuzz-eqn/{prim}", runner, jax_version, (prim,), [np.asarray(ref)], [np.asarray(out)], (0,),
                      None, inputs=tuple(np.asarray(x) for x in inputs))


def test_add_zero_model_takes_only_the_negative_zero_kept():
    entry = DV.BY_ID["xla-cpu-add-zero-keeps-negative-zero"]
    x, z = np.float32([-0.0, 1.0]), np.float32(0.0)
    assert DM.matches(entry, _failure("add", (x, z), np.float32([0.0, 1.0]), np.float32([-0.0, 1.0])))
    # a wrong nonzero sum is not this divergence
    assert not DM.matches(entry, _failure("add", (x, z), np.float32([0.0, 1.0]), np.float32([-0.0, 2.0])))
    # x + (-0.0) = x exactly: no difference to explain
    assert not DM.matches(entry, _failure("add", (x, -z), np.float32([-0.0, 1.0]), np.float32([0.0, 1.0])))


def test_reciprocal_model_is_two_roundings_not_any_error():
    entry = DV.BY_ID["xla-cpu-divide-by-constant-as-reciprocal"]
    x, y = np.float32([-1.1046107e-03, 0.7]), np.float32([5.0, 5.0])
    exact = (x.astype(np.float64) / 5).astype(np.float32)
    twice = (x * (np.float32(1) / y)).astype(np.float32)
    assert (exact != twice).any()
    assert DM.matches(entry, _failure("div", (x, y), exact, twice))
    off = twice.copy()
    off[0] = np.nextafter(twice[0], np.float32(1))
    assert not DM.matches(entry, _failure("div", (x, y), exact, off))


def test_bool_product_model():
    entry = DV.BY_ID["xla-cpu-multiply-by-converted-bool-as-select"]
    x, p = np.float32([np.nan, -0.0, np.inf, 3.0]), np.float32([0, 0, 0, 1])
    ieee = np.float32([np.nan, -0.0, np.nan, 3.0])
    assert DM.matches(entry, _failure("mul", (x, p), ieee, np.float32([0, 0, 0, 3.0])))
    assert not DM.matches(entry, _failure("mul", (x, p), ieee, np.float32([1.0, 0, 0, 3.0])))


def test_folded_clz_model_is_version_bounded():
    entry = DV.BY_ID["xla-cpu-constant-folded-clz-of-negative"]
    x = np.int32([-1, 5])
    f = _failure("clz", (x,), np.int32([0, 29]), np.int32([-32, 29]), jax_version="0.10.2")
    assert DM.matches(entry, f)
    assert not DM.matches(entry, _failure("clz", (x,), np.int32([0, 29]), np.int32([-32, 29]), jax_version="0.11.2"))
    assert not DM.matches(entry, _failure("clz", (x,), np.int32([0, 29]), np.int32([-31, 29]), jax_version="0.10.2"))


def _conv(x, w):
    return (lax.conv_general_dilated(x, w, (2,), ((1, 1),), lhs_dilation=(2,), dimension_numbers=("NCH", "OIH", "NCH"),
                                     feature_group_count=2, precision=lax.Precision.HIGHEST),)


def test_convolution_model_leaves_out_only_the_padding_taps():
    # The reduced finding (fail:conv_general_dilated:float32:xla:cpu:nan, 2026-11-29): output 0 is
    # 0 * 0.894 + x * -max + 0 * NaN over the padded lhs [0, x, 0]: NaN by the definition; XLA:CPU
    # leaves out the two padding taps: x * -max = 2.8138106e+37 (x = -0.0827). Output 1: 0 * ... = 0.
    entry = DV.BY_ID["xla-cpu-convolution-skips-padding"]
    x = np.frombuffer(bytes.fromhex("9f59a9bd00000000"), np.float32).reshape(1, 2, 1)
    w = np.frombuffer(bytes.fromhex("84f4643fffff7fff0000c07fec95ddbceefda9408e73ca40"), np.float32).reshape(2, 1, 3)
    ieee = np.float32([[[np.nan], [0.0]]])
    skipped = np.float32([[[x[0, 0, 0] * -np.finfo(np.float32).max], [0.0]]])
    assert skipped[0, 0, 0] == np.float32(2.8138106e+37)

    def failure(out):
        return DM.Failure("fuzz-eqn/conv_general_dilated", "xla:cpu", "0.12.0.1", ("conv_general_dilated",),
                          [ieee], [out], (0,), None, inputs=(x, w), fn=_conv)
    assert DM.matches(entry, failure(skipped))
    off = skipped.copy()
    off[0, 0, 0] *= 2           # not what the real taps give
    assert not DM.matches(entry, failure(off))
    # a NaN weight on a real lhs element is NaN in XLA:CPU too: a finite value there is not this divergence
    w_real = w.copy()
    w_real[0, 0, 1] = np.nan
    f = DM.Failure("fuzz-eqn/conv_general_dilated", "xla:cpu", "0.12.0.1", ("conv_general_dilated",),
                   [ieee], [skipped], (0,), None, inputs=(x, w_real), fn=_conv)
    assert not DM.matches(entry, f)


@pytest.mark.parametrize("divergence, fn, inputs", [
    ("xla-cpu-add-zero-keeps-negative-zero", lambda x: (lax.add(x, np.float32(0.0)),), [np.float32([-0.0, 2.0])]),
    ("xla-cpu-divide-by-constant-as-reciprocal", lambda x: (lax.div(x, np.float32(5.0)),),
     [np.float32([-1.1046107e-03, 0.7, 1.0 / 3])]),
    ("xla-cpu-multiply-by-converted-bool-as-select",
     lambda x, p: (lax.mul(x, lax.convert_element_type(p, np.float32)),),
     [np.float32([np.nan, -0.0, np.inf, 2.0]), np.array([False, False, False, True])]),
    ("xla-cpu-constant-folded-clz-of-negative", lambda x: (lax.add(x, lax.clz(np.int32(-1))),), [np.int32([1, 2])]),
    ("xla-cpu-convolution-skips-padding", _conv,
     [np.float32([[[-0.0827], [0.0]]]), np.float32([[[0.894, -3.4e38, np.nan]], [[-0.027, 5.31, 6.33]]])]),
])
def test_reduced_findings_are_reported_as_their_divergence(divergence, fn, inputs):
    case = Case(id="t", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"))
    with case.context(), np.errstate(all="ignore"):
        ref = [np.asarray(r) for r in interp.interpret(fn)(*inputs)]
        rec = oracle.judge(fn, inputs, ref, get_runner("xla:cpu"), case=case)
        got = suite.run(get_runner("xla:cpu"), case, inputs)
    differs = any((bits(normalize_nans(r)) != bits(normalize_nans(g))).any() for r, g in zip(ref, got))
    # where XLA:CPU computes what the finding says the outcome names the entry; elsewhere it passes
    assert rec["outcome"] == ("known-divergence" if differs else "pass"), rec
    if differs:
        assert rec["known_divergence"]["id"] == divergence


_X = np.frombuffer(bytes.fromhex("69c61141"), np.float32)[0]   # x + x * x rounds twice to 92.12016


def _state_fma(x):
    ref = jax.new_ref(x)
    jax.ref.addupdate(ref, (slice(None),), lax.mul(x, x))
    return (ref[...],)


def _state_fma_indexed(x):
    ref = jax.new_ref(x)
    jax.ref.addupdate(ref, (slice(1, 3),), lax.mul(x[:2], x[:2]))
    return (ref[...],)


# The 2026-11-29 campaigns' value buckets that an allowance's replay now explains (docs/findings.md):
# each program's XLA:CPU result differs from the reference, and the oracle names the allowance.
@pytest.mark.parametrize("allowance, fn, inputs", [
    # a dot_general contracting nothing (an outer product) feeding an add: one FMA per element
    ("fma-contraction", lambda x, c: (lax.add(c, lax.dot_general(x, x, (((), ()), ((), ())),
                                                                 precision=lax.Precision.HIGH)),),
     [np.frombuffer(bytes.fromhex("0000003411f2b0be04e507c1787df2c09804353b"), np.float32).copy(),
      np.full((5, 5), np.float32(-7.577816))]),
    # a product accumulated into a ref: ref[...] += x * x
    ("fma-contraction", _state_fma, [np.float32([0.0, _X, 3.0, 1.1, -0.7])]),
    ("fma-contraction", _state_fma_indexed, [np.float32([_X, _X, 1.1, -0.7])]),
    # exp(a) * exp(b) => exp(a + b): integer_pow of an exp, exp(x) * exp(x)
    ("algebraic-rewrite", lambda x: (lax.integer_pow(lax.exp(x), 4),), [np.float32([-1.0])]),
    ("algebraic-rewrite", lambda x: (lax.mul(lax.exp(x), lax.exp(x)),),
     [np.frombuffer(bytes.fromhex("ef6feec0"), np.float32).copy()]),
    # exp(a) / exp(b) => exp(a - b): an overflowing exp over itself is 1, not NaN
    ("algebraic-rewrite", lambda x: (lax.div(lax.exp(x), lax.exp(x)),), [np.float32([91.98161, 1.0])]),
    # log(exp2(x)) => ln2 * x (JAX lowers exp2 as exp(ln2 * x)): -0.0 stays -0.0
    ("algebraic-rewrite", lambda x: (lax.log(lax.exp2(x)),), [np.float32([-0.0, 1.5, -2.75])]),
])
def test_value_buckets_explained_by_an_allowance(allowance, fn, inputs):
    case = Case(id="t", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"))
    with case.context(), np.errstate(all="ignore"):
        ref = [np.asarray(r) for r in interp.interpret(fn)(*inputs)]
        got = suite.run(get_runner("xla:cpu"), case, inputs)
        rec = oracle.judge(fn, inputs, ref, get_runner("xla:cpu"), case=case)
    differs = any((bits(normalize_nans(r)) != bits(normalize_nans(np.asarray(g)))).any() for r, g in zip(ref, got))
    # JAX 0.11.2's and 0.12.0.1's XLA do not apply the exp rewrites (the campaign on 0.10.2 found them):
    # where XLA:CPU computes the reference's value the program passes
    if not differs:
        assert allowance == "algebraic-rewrite" and rec["outcome"] == "pass", rec
        return
    assert rec["outcome"] == "pass-with-allowance" and allowance in rec["allowance"], rec


def test_replayed_rewrites_are_the_rewritten_values_not_any_value():
    """The replays compute the rewritten expression itself: a backend one ulp off it still fails."""
    from conformance.replay import Variant, reference_replay
    x = np.float32([-1.0])
    closed = jax.make_jaxpr(lambda x: lax.integer_pow(lax.exp(x), 4))(x)
    (got,), _ = reference_replay(closed, [x], variant=Variant(rewrites=True))
    assert got[0] == np.float32(0.01831564)            # exp(-4) correctly rounded (mpmath: 0.0183156388...)
    closed = jax.make_jaxpr(_state_fma)(np.float32([_X]))
    (got,), _ = reference_replay(closed, [np.float32([_X])], variant=Variant(fma=True))
    x64 = np.float64(_X)
    assert got[0] == np.float32(x64 * x64 + x64)         # one rounding of x + x * x
    assert got[0] != np.float32(np.float32(x64 * x64) + np.float32(x64))


def test_interior_pad_flush_model():
    entry = DV.BY_ID["xla-cpu-bf16-interior-pad-flushes-subnormals"]
    sub = np.array([0x8001, 0x0001, 0x3F80], np.uint16).view(D.bfloat16)
    flushed = np.array([0x8000, 0x0000, 0x3F80], np.uint16).view(D.bfloat16)
    wrong_sign = np.array([0x0000, 0x0000, 0x3F80], np.uint16).view(D.bfloat16)
    other = np.array([0x8001, 0x0001, 0x3F81], np.uint16).view(D.bfloat16)
    assert DM.matches(entry, _failure("pad", (sub,), sub, flushed))
    assert not DM.matches(entry, _failure("pad", (sub,), sub, wrong_sign))
    assert not DM.matches(entry, _failure("pad", (sub,), sub, other))
    assert not DM.matches(entry, _failure("pad", (sub,), sub, flushed, jax_version="0.10.2"))


def test_interior_pad_flush_is_reported_as_its_divergence():
    x = np.array([[0x8001, 0x0001], [0x0001, 0x8001]], np.uint16).view(D.bfloat16)
    fn = lambda x: (lax.pad(x, np.array(0, D.bfloat16), ((0, 0, 1), (0, 0, 0))),)
    case = Case(id="t", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"))
    with case.context():
        ref = [np.asarray(r) for r in interp.interpret(fn)(x)]
        got = np.asarray(suite.run(get_runner("xla:cpu"), case, [x])[0])
        rec = oracle.judge(fn, [x], ref, get_runner("xla:cpu"), case=case)
    if (bits(got) == bits(ref[0])).all():     # JAX 0.10.2 copies the bits
        assert rec["outcome"] == "pass", rec
    else:
        assert rec["outcome"] == "known-divergence", rec
        assert rec["known_divergence"]["id"] == "xla-cpu-bf16-interior-pad-flushes-subnormals"


@pytest.mark.parametrize("prim, x, version", [
    # sinh(586.82) 376 ulp off (the fuzzer's element; mpmath: 1.9346889e+254), within 2 x 495
    ("sinh", 586.8196946229438, "0.12.0.1"),
    # JAX 0.10.2 erf_inv near 0.643: 19 ulp (budget 2 x 21)
    ("erf_inv", 0.6431218161758543, "0.10.2"),
])
def test_measured_budgets_take_the_recorded_case_not_more(prim, x, version):
    import mpmath
    entry = DV.BY_ID["xla-cpu-special-functions"]
    with mpmath.workprec(200):
        exact = float(mpmath.sinh(x) if prim == "sinh" else mpmath.erfinv(x))
    ulp = np.spacing(exact)
    limit = DV.XLA_CPU_CASE_ULP[(prim, "float64")]
    inside = np.float64(exact + (limit // 2) * ulp)
    outside = np.float64(exact + (limit + 2) * ulp)
    fx = np.float64([x])
    assert DM.matches(entry, _failure(prim, (fx,), np.float64([exact]), np.array([inside]), jax_version=version))
    assert not DM.matches(entry, _failure(prim, (fx,), np.float64([exact]), np.array([outside]), jax_version=version))
