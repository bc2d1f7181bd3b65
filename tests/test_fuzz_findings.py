"""The XLA:CPU differences the program fuzzer found (docs/findings.md, spec/divergences.py): each
entry's model recognises what XLA:CPU computes and nothing else, and the fuzzer's oracle reports
the reduced programs as those known divergences (or as passes, on a JAX where XLA computes the
IEEE result)."""
from __future__ import annotations

import numpy as np
import pytest
from jax import lax

import interp
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
