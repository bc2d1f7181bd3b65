"""The lax case families: every supported lax-family primitive is exercised by a quick case, and the
XLA:CPU divergence matcher for special functions recognises exactly the recorded differences."""
from __future__ import annotations

import numpy as np
import pytest
from jax import lax

import interp
from interp.registry import RULES
from conformance import divergence_models as DM

F32 = np.float32


def test_every_supported_lax_primitive_has_a_quick_case():
    from conformance.cli import exercised_primitives
    counts, untraceable = exercised_primitives("quick")
    cov = interp.coverage()
    lax_family = {name for name, rule in RULES.items()
                  if getattr(rule, "__module__", "").startswith("interp.rules.lax_")
                  and cov.get(name, "unsupported") != "unsupported"}
    assert len(lax_family) > 100
    assert not [c for c in untraceable if c.startswith("lax_")]
    assert sorted(lax_family - set(counts) - set(NOT_IN_A_CASE)) == []


NOT_IN_A_CASE = {
    "stage": "tracing never records it (every trace's stage_value lifts the value without an "
             "equation): tests/test_lax_structure.py::test_stage_is_the_identity_as_jax_evaluates_it "
             "runs a hand-built jaxpr",
}


def _failure(prim, ref, out, *inputs, case="lax_special/x/float32/specials"):
    ref, out = np.asarray(ref), np.asarray(out)
    return DM.Failure(case, "xla:cpu", "0.12.0.1", (prim,), [ref], [out], (0,), None,
                      inputs=tuple(np.asarray(a) for a in inputs))


def _next(x, n):
    """x moved n float32 ulps up."""
    return (np.asarray(x, F32).view(np.int32) + np.int32(n)).view(F32)


def _matched(f):
    d = DM.find(f)
    return d is not None and d.id == "xla-cpu-special-functions"


def test_measured_accuracy_is_recognised_and_more_is_a_fail():
    x = np.array([3.3, 7.1], F32)
    ref = np.array([9.85, 137.2], F32)
    # spec/lax_special.py XLA_CPU_ULP: exp2 float32 budget 116 ulp (2x the measured 58)
    assert _matched(_failure("exp2", ref, _next(ref, 100), x))
    assert not _matched(_failure("exp2", ref, _next(ref, 117), x))
    # digamma: the case measurement (29 ulp near the root) raises the budget to 29, not more
    assert _matched(_failure("digamma", ref, _next(ref, 29), x))
    assert not _matched(_failure("digamma", ref, _next(ref, 30), x))
    # a primitive XLA:CPU has no measured deficiency for is never explained
    assert not _matched(_failure("exp", ref, _next(ref, 3), x))
    # NaN where the reference is finite, at ordinary arguments: a fail
    assert not _matched(_failure("exp2", ref, np.array([np.nan, 137.2], F32), x))


def test_subnormal_and_extreme_arguments_only_for_the_listed_primitives():
    sub = np.array([1e-45, -1e-45], F32)
    ref = np.array([1.1190347e-15, -1.1190347e-15], F32)
    wrong = np.array([-5.595e-16, -5.595e-16], F32)
    assert _matched(_failure("cbrt", ref, wrong, sub))            # cbrt(2**-149) < 0 on XLA:CPU
    assert not _matched(_failure("cbrt", ref, wrong, np.array([1e-30, -1e-30], F32)))   # normal input
    a = np.array([0.0, 3.4028235e38], F32)
    x = np.array([0.5, 3.0], F32)
    assert _matched(_failure("igamma", np.array([1.0, 0.0], F32), np.array([np.nan, np.nan], F32), a, x))
    mid = np.array([2.0, 3.0], F32)
    assert not _matched(_failure("igamma", np.array([1.0, 0.0], F32), np.array([np.nan, np.nan], F32), mid, x))
    # zeta(s, q <= 0): the series diverges (reference NaN), XLA:CPU gives +inf
    assert _matched(_failure("zeta", np.array([np.nan], F32), np.array([np.inf], F32), np.array([2.0], F32),
                             np.array([-1.0], F32)))
    # without the case's arguments nothing elementwise can be recognised
    assert not _matched(_failure("cbrt", ref, wrong))


def test_complex_mul_within_its_dot_product_bound_needs_no_explanation():
    x = np.array([0.1 + 3j, 1e30 + 1j], np.complex64)
    y = np.array([-0.1 + 3j, 1e30 - 1j], np.complex64)
    ref = np.array([-9.01 + 0j, np.inf + 0j], np.complex64)
    close = np.array([-9.01 - 7.450581e-09j, np.inf + 0j], np.complex64)     # an FMA's residue
    assert _matched(_failure("mul", ref, close, x, y))
    far = np.array([-9.01 + 1e-3j, np.inf + 0j], np.complex64)
    assert not _matched(_failure("mul", ref, far, x, y))
    # huge parts overflow one of the four real products: recorded
    assert _matched(_failure("mul", ref, np.array([-9.01 + 0j, np.inf + np.nan * 1j], np.complex64), x, y))


@pytest.mark.skipif(not hasattr(lax, "polynomial"), reason="lax.polynomial is JAX >= 0.12")
def test_fma_replay_of_polynomial_matches_xla_cpu_bitwise():
    import jax
    from conformance.replay import Variant, reference_replay
    from tests.support import xla_cpu
    x = np.linspace(-4, 4, 257, dtype=F32)
    fn = lambda v: lax.polynomial(v, (3.0, -2.0, 0.5, 1.25, -0.75))   # noqa: E731
    closed = jax.make_jaxpr(fn)(x)
    fused = reference_replay(closed, [x], Variant(fma=True))[0][0]
    unfused = np.asarray(interp.interpret(fn)(x))
    backend = np.asarray(xla_cpu(fn, x))
    assert np.array_equal(fused.view(np.int32), backend.view(np.int32))
    assert not np.array_equal(unfused.view(np.int32), backend.view(np.int32))   # the replay matters


def test_e3m4_sqrt_through_float16_is_recognised_bit_for_bit():
    import ml_dtypes
    e3m4 = np.dtype(ml_dtypes.float8_e3m4)
    x = np.array([0.96875, 4.0], e3m4)
    ref = np.array([0.96875, 2.0], e3m4)          # sqrt(0.96875) = 0.98425 < the midpoint 0.984375
    twice = np.array([1.0, 2.0], e3m4)            # float16 rounds it onto the midpoint, then to even
    f = DM.Failure("lax_special/sqrt/float8_e3m4/exhaustive", "xla:cpu", "0.12.0.1", ("sqrt",), [ref], [twice],
                   (0,), 1.0, inputs=(x,))
    assert DM.find(f).id == "xla-cpu-e3m4-sqrt-via-f16"
    other = np.array([0.9375, 2.0], e3m4)         # any other wrong value is not this divergence
    f = DM.Failure("c", "xla:cpu", "0.12.0.1", ("sqrt",), [ref], [other], (0,), 1.0, inputs=(x,))
    assert DM.find(f) is None
