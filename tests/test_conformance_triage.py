"""What the nightly triage added to the harness: known divergences that explain a timeout or a
crash, allowances and divergences explaining one output together, backend "no registered
implementation" errors as backend-unsupported."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance import execute as E
from conformance.classify import classify_failure
from conformance.judge import explain_outcome
from spec import divergences as DV

HANG = "random/split_fold_in/threefry4x32-partitionable"


def _timeout(case_id=HANG, version="0.10.2", outcome="timeout", runner="xla:cpu"):
    rec = E.base_record(case_id, runner, 0)
    rec.outcome, rec.jax_version = outcome, version
    rec.output = "no result after 60 s; worker output:\n"
    rec.detail = "no result after 60 s; worker output:"
    return rec


def test_a_timeout_a_divergence_declares_becomes_known_divergence():
    rec = explain_outcome(_timeout())
    assert rec.outcome == "known-divergence" and rec.raw_outcome == "timeout"
    assert rec.known_divergence["id"] == "xla-cpu-threefry4x32-fold-in-split-hang"
    assert rec.output.startswith("no result after 60 s")      # the backend's own output is kept
    # Only where the entry says: another JAX version, case, runner or outcome stays as it was.
    assert explain_outcome(_timeout(version="0.12.0.1")).outcome == "timeout"
    assert explain_outcome(_timeout(case_id="random/split_fold_in/philox4x32-partitionable")).outcome == "timeout"
    assert explain_outcome(_timeout(runner="pallas:interpret")).outcome == "timeout"
    assert explain_outcome(_timeout(outcome="crash")).outcome == "crash"
    # the nightly's other timeout: XLA:CPU's igamma series at a = x = DBL_MAX (every version)
    rec = explain_outcome(_timeout("lax_special/igamma/float64/specials", version="0.12.0.1"))
    assert rec.known_divergence["id"] == "xla-cpu-igamma-huge-argument-hang"
    assert explain_outcome(_timeout("lax_special/igamma/float32/specials")).outcome == "timeout"
    # A fail is never matched as a timeout, and the hang entry explains no value difference.
    hang = DV.BY_ID["xla-cpu-threefry4x32-fold-in-split-hang"]
    f = DV.Failure(HANG, "xla:cpu", "0.10.2", ("random_bits",), [np.zeros(3, np.uint32)],
                   [np.ones(3, np.uint32)], (0,), None)
    assert not hang.matches(f)
    # Entries for outcomes without values must name their cases (else they would match anything).
    with pytest.raises(ValueError, match="must name its cases"):
        DV.Divergence("x", "l", "s", runners=("xla:cpu",), outcomes=("timeout",))


def test_isolated_timeouts_are_explained_where_they_are_recorded(monkeypatch):
    """run_isolated (which builds the record of a hang or a dead worker) matches it against the
    divergences; the plugin's isolated path (and `repro --isolated`) get that record."""
    import conformance.isolation as iso
    from conformance.plugin import _Session

    class HangingWorker:          # what Worker.request answers when the case does not return
        def __init__(self, env=None):
            pass

        def request(self, req, timeout):
            return "timeout", f"no result after {timeout} s; worker output:\n"

        def close(self):
            pass

    class Config:
        def getoption(self, name):
            return {"--results-dir": None, "--no-first-divergence": False, "--case-isolation": "subprocess",
                    "--case-timeout": 1.0, "--profile": "quick", "--case-save-outputs": None}[name]

    igamma = "lax_special/igamma/float64/specials"      # explained on every JAX version
    rec = iso.run_isolated(HangingWorker(), igamma, "xla:cpu", 0, 1.0)
    assert rec.outcome == "known-divergence" and rec.raw_outcome == "timeout"
    assert rec.known_divergence["id"] == "xla-cpu-igamma-huge-argument-hang"
    monkeypatch.setattr(iso, "Worker", HangingWorker)
    session = _Session(Config())
    assert session.executor.run(igamma, "xla:cpu", 0).outcome == "known-divergence"
    assert session.executor.run("lax_elementwise/add/int32/3x5", "xla:cpu", 0).outcome == "timeout"


def test_no_registered_implementation_is_backend_unsupported_not_a_crash():
    # XLA:CPU's status for the custom call pin lowers to, raised while compiling; state/pin_unpin/int32
    # runs it end to end (tests/test_conformance_cases_calls.py). Judged by type, stage and status
    # code: tests/test_conformance_gpu.py::test_backend_failures_are_classified_by_what_raised_them.
    from hardware_runners.base import BackendFailure
    from jax.errors import JaxRuntimeError
    err = JaxRuntimeError("NOT_FOUND: No registered implementation for untyped custom call to Pin for Host")
    assert classify_failure(BackendFailure("compile", err))[0] == "backend-unsupported"
    assert classify_failure(BackendFailure("execute", JaxRuntimeError(
        "INTERNAL: Failed to execute XLA Runtime executable")))[0] == "crash"


def test_one_options_table_feeds_the_cli_and_the_plugin():
    import argparse
    from conformance import plugin
    from conformance.cli import main

    class Group:          # what pytest_addoption sees of pytest's parser
        def __init__(self):
            self.options = {}

        def getgroup(self, name):
            return self

        def addoption(self, name, **kw):
            self.options[name] = kw
    g = Group()
    plugin.pytest_addoption(g)
    run = argparse.ArgumentParser()
    plugin.add_run_options(run)
    cli = {a.option_strings[0]: a for a in run._actions if a.option_strings and a.dest != "help"}
    assert len(cli) == len(plugin.OPTIONS) >= 9
    for o in plugin.OPTIONS:
        a = cli[o.cli]
        assert g.options[o.pytest]["help"] in a.help          # one text (run may add its own default)
        assert a.type is g.options[o.pytest].get("type") and a.choices == g.options[o.pytest].get("choices")
        if o.cli != "--timeout":
            assert a.default == g.options[o.pytest]["default"]
    # run forwards exactly what it parsed, in the plugin's spelling.
    args = run.parse_args(["--examples", "7", "--shrinks", "3", "--search-budget", "1.5", "--cases", "a,b",
                           "--seed", "4", "--profile", "nightly", "--timeout", "9"])
    fwd = plugin.forward_args(args)
    pairs = dict(zip(fwd[::2], fwd[1::2]))
    assert pairs == {"--profile": "nightly", "--case-seed": "4", "--case-seeds": "1", "--case-examples": "7",
                     "--case-shrinks": "3", "--case-search-budget": "1.5", "--case-timeout": "9.0",
                     "--case-filter": "a,b"}
    # unset options (examples, filter, runners) are left to the plugin's defaults
    assert "--case-examples" not in plugin.forward_args(run.parse_args([]))
    with pytest.raises(SystemExit):            # the real CLI has them (and rejects a bad profile)
        main(["run", "--profile", "weekly"])


# --- nightly findings: what explains them ---------------------------------------------------------
def _failure(prim, ref, out, *inputs, allowed=(), version="0.12.0.1"):
    ref, out = np.asarray(ref), np.asarray(out)
    return DV.Failure(f"lax_special/{prim}/x", "xla:cpu", version, (prim,), [ref], [out], (0,), None,
                      inputs=tuple(np.asarray(a) for a in inputs), allowed=allowed)


def _up(x, n):
    """x moved n ulps away from zero (same dtype)."""
    x = np.asarray(x)
    i = {2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    return (x.view(i) + i(n)).view(x.dtype)


def test_elements_an_allowance_explains_count_for_the_divergence():
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    # log2 of a bfloat16 subnormal: -133 exactly; XLA:CPU reads the argument as 0 (flush-to-zero) and
    # gives -inf. Next to it an element within log2's measured bfloat16 budget (2 ulp), beyond the
    # case's ULP(1): neither the allowance nor the divergence explains the output alone.
    x = np.array([9.183549615799121e-41, 3.0], bf16)
    ref = np.array([-133.0, 1.5849625], bf16)
    out = np.array([-np.inf, _up(ref[1], 2)], bf16)
    assert DV.find(_failure("log2", ref, out, x)) is None
    flushed = np.array([True, False])                  # what the flush-to-zero replay explains
    assert DV.find(_failure("log2", ref, out, x, allowed=[flushed])).id == "xla-cpu-special-functions"
    out[1] = _up(ref[1], 3)                            # beyond the budget: still a fail
    assert DV.find(_failure("log2", ref, out, x, allowed=[flushed])) is None


@pytest.mark.skipif(not hasattr(__import__("jax").lax, "log2"), reason="lax.log2 is JAX >= 0.11")
def test_flush_to_zero_and_a_measured_budget_in_one_output_end_to_end():
    # the nightly's lax_special/log2/bfloat16/33x65 (seed 0): a subnormal argument flushed (-inf for
    # -133) and 2-ulp elements in the same output
    from conformance.cases import get
    rec = E.run_case(get("lax_special/log2/bfloat16/33x65"), "xla:cpu", 0, first_divergence=False)
    assert rec.outcome == "known-divergence" and rec.allowance == "flush-to-zero"
    assert rec.known_divergence["id"] == "xla-cpu-special-functions"


def test_digamma_and_lgamma_errors_are_absolute_near_their_zeros():
    import mpmath
    from interp import interpret
    from jax import lax
    from tests.support import x64, xla_cpu
    with x64():
        x = np.array([-0.5, -0.5047851201067424, 1.4617905597035024])   # nightly: 114, 1151, 11930 ulp
        ref = np.asarray(interpret(lax.digamma)(x))
        out = np.asarray(xla_cpu(lax.digamma, x))
    with mpmath.workdps(40):        # the reference is right (independently)
        assert [float(mpmath.digamma(v)) for v in x] == ref.tolist()
    from conformance.checks import ulp_distance
    assert ulp_distance(ref, out).max() > 100                    # far beyond any ULP budget...
    assert DV.find(_failure("digamma", ref, out, x)).id == "xla-cpu-special-functions"   # ...but a few eps
    eps = np.finfo(np.float64).eps
    assert DV.find(_failure("digamma", ref, ref + 17 * eps, x)) is not None
    assert DV.find(_failure("digamma", ref, ref + 19 * eps, x)) is None         # budget 18 eps here
    big = np.array([100.0]), np.array([4.600161852738087])                      # |psi| > 1: relative
    assert DV.find(_failure("digamma", big[1], big[1] * (1 + 17 * eps), big[0])) is not None
    assert DV.find(_failure("digamma", big[1], big[1] + 17 * eps, big[0])) is not None
    assert DV.find(_failure("digamma", big[1], big[1] * (1 + 20 * eps), big[0])) is None


def test_erf_inv_is_xlas_erf_inv_of_the_rounded_square():
    import mpmath
    from interp import interpret
    from jax import lax
    from tests.support import x64, xla_cpu
    from conformance.checks import ulp_distance
    x32 = np.array([0.99982744, -0.99982744, 0.3], np.float32)      # the float32 worst case (65 ulp)
    ref32 = np.asarray(interpret(lax.erf_inv)(x32))
    out32 = np.asarray(xla_cpu(lax.erf_inv, x32))
    with x64():
        x64_ = np.array([1 - 2.0 ** -27, 0.5])                         # the float64 one (498928 ulp)
        ref64 = np.asarray(interpret(lax.erf_inv)(x64_))
        out64 = np.asarray(xla_cpu(lax.erf_inv, x64_))
    with mpmath.workdps(50):
        assert float(mpmath.erfinv(mpmath.mpf(float(x64_[0])))) == ref64[0]
    assert ulp_distance(ref32, out32).max() >= 60 and ulp_distance(ref64, out64).max() > 4e5
    for x, ref, out in ((x32, ref32, out32), (x64_, ref64, out64)):
        assert DV.find(_failure("erf_inv", ref, out, x)).id == "xla-erf-inv-rounded-square"
        wrong = out.copy()
        wrong[0] = _up(ref[0], 60)       # as far off, the other way: not the rounded square's value
        assert DV.find(_failure("erf_inv", ref, wrong, x)) is None
    # within the ordinary budget no model is needed: the generic entry explains it
    near = _up(ref32, 3)
    assert DV.find(_failure("erf_inv", ref32, near, x32)).id == "xla-cpu-special-functions"


def test_normal_f32_budget_derives_from_erf_inv_and_holds_on_xla_cpu():
    from conformance.cases import get
    case = get("random/normal_f32/philox4x32-partitionable")
    mode = case.modes_for([np.zeros((5, 17), np.float32)])[0]
    assert mode.ulp == int(np.ceil(np.sqrt(2) * DV.XLA_ERF_INV_F32_WORST_ULP)) + 1 == 93
    rec = E.run_case(case, "xla:cpu", 0, first_divergence=False)
    assert rec.outcome == "pass" and 60 < rec.max_ulp <= 91    # 82 at seed 0 (nightly finding)


# --- betainc: XLA's prefactor rounding and its iteration cap (spec/divergences.py _betainc_model) ------
BETA = "xla-betainc-prefactor-and-iteration-cap"


def _betainc_points(dtype):
    """a = b from 1e3 to 1e9 at the mean + (0, 1/2, 3) sd: converged, converged but far beyond the ULP
    budget, and past the iteration cap (spec/divergences.py's measurement, a subset)."""
    pts = []
    for m in (1e3, 1e5, 1e6, 1e7, 1e9):
        for k in (0, 0.5, 3):
            pts.append((m, m, 0.5 + k * np.sqrt(0.25 / (2 * m + 1))))
    return [np.array(v, dtype) for v in zip(*pts)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_betainc_large_parameters_are_explained_exactly_where_xla_cpu_errs(dtype):
    import jax
    from jax import lax
    from interp import interpret
    from conformance.checks import ulp_distance
    from tests.support import x64, xla_cpu
    with x64(dtype == np.float64):
        a, b, x = _betainc_points(dtype)
        ref = np.asarray(interpret(lax.betainc)(a, b, x))
        out = np.asarray(xla_cpu(lax.betainc, a, b, x))
        # I_{1/2}(a, a) = 1/2 by symmetry, exactly: the reference has it; XLA:CPU is outside [0, 1]
        # past the cap (reproducers of the entry: float64 -1.1955 at 1e9, float32 -inf / 1.0)
        assert np.all(ref[x == 0.5] == 0.5)
    version = jax.__version__
    assert np.any((out < 0) | (out > 1))
    assert ulp_distance(ref, out).max() > DV._measured_ulp("regularized_incomplete_beta", np.dtype(dtype).name)
    assert DV.find(_failure("regularized_incomplete_beta", ref, out, a, b, x, version=version)).id == BETA
    # Not a blanket over large parameters: where the fraction converges, a value off by more than the
    # prefactor's rounding explains is still a fail (a = b = 1e3 + sd/2: the bound is 1e-11 absolute in
    # float64, 6e-3 in float32; 1e5 + 3 sd, I = 0.99865: 8e-12, 0.035).
    for i in (1, 5):
        wrong = ref.copy()
        wrong[i] = ref[i] * (1 + (1e-9 if dtype == np.float64 else 0.05))
        assert ulp_distance(ref[i:i + 1], wrong[i:i + 1])[0] > 0
        assert DV.find(_failure("regularized_incomplete_beta", ref, wrong, a, b, x, version=version)) is None, i


def test_betainc_rare_domain_point_is_the_prefactor_and_a_wrong_value_is_not():
    """The nightly's fail (lax_special/regularized_incomplete_beta/float32/33x65, seed 1, JAX 0.12.0.1):
    737 ulp at (17.059217, 0.1, 0.95561355), beyond the measured 674; above the mean XLA computes
    1 - I_{1-x}(b, a), so the prefactor's relative error becomes 26x larger in I = 0.036."""
    import jax
    import mpmath
    from jax import lax
    from interp import interpret
    from tests.support import xla_cpu
    a, b, x = (np.array([v], np.float32) for v in (17.059217, 0.1, 0.95561355))
    ref = np.asarray(interpret(lax.betainc)(a, b, x))
    with mpmath.workdps(40):
        assert ref[0] == np.float32(float(mpmath.betainc(float(a[0]), float(b[0]), 0, float(x[0]), regularized=True)))
    out = np.asarray(xla_cpu(lax.betainc, a, b, x))
    f = _failure("regularized_incomplete_beta", ref, out, a, b, x, version=jax.__version__)
    assert DV.find(f).id == BETA
    assert DV.find(_failure("regularized_incomplete_beta", ref, ref + np.float32(1e-4), a, b, x)) is None
    # within the measured ULP budget the generic entry explains it, not the model
    from conformance.checks import ulp_distance
    near = _up(ref, 600)
    assert ulp_distance(ref, near)[0] == 600
    assert DV.find(_failure("regularized_incomplete_beta", ref, near, a, b, x)).id == "xla-cpu-special-functions"


def test_betainc_model_continued_fraction_is_the_incomplete_beta():
    """The matcher's long-double replay of JAX's Lentz loop computes the continued fraction of DLMF
    8.17.22: h exp(t) / a is I_x(a, b) (t with mpmath), against mpmath's betainc; the iteration counts
    grow near the mean and pass the float64 cap (600) between a = b = 1e5 and 1e6."""
    import mpmath
    pts = [(2.0, 3.0, 0.3), (50.0, 40.0, 0.5), (0.5, 7.0, 0.01), (300.0, 200.0, 0.58)]
    a, b, x = (np.array(v) for v in zip(*pts))
    need, h = DV._betainc_lentz(a, b, x, 2.0 ** -53, 600)
    assert np.all(need < 600)
    with mpmath.workdps(40):
        for i, (ai, bi, xi) in enumerate(pts):
            t = (ai * mpmath.log(xi) + bi * mpmath.log1p(-xi) - mpmath.loggamma(ai) - mpmath.loggamma(bi)
                 + mpmath.loggamma(ai + bi))
            want = mpmath.betainc(ai, bi, 0, xi, regularized=True)
            assert abs(h[i] * mpmath.exp(t) / ai / want - 1) < 1e-13, pts[i]
    m = np.array([1e5, 1e6])
    need, _ = DV._betainc_lentz(m, m, np.full(2, 0.5), 2.0 ** -53, 5000)
    assert need[0] < 600 < need[1]


def test_betainc_nightly_failures_become_known_divergences():
    from conformance.cases import get
    for case_id, seed in (("lax_special/regularized_incomplete_beta/float32/33x65", 1),
                          ("lax_special/regularized_incomplete_beta/float64/large-parameters", 0)):
        rec = E.run_case(get(case_id), "xla:cpu", seed, first_divergence=False)
        assert rec.outcome == "known-divergence", (case_id, rec.outcome)
        assert rec.known_divergence["id"] == BETA
    assert get("lax_special/regularized_incomplete_beta/float32/large-parameters").profile == "nightly"


# --- the second pass over the H100 evidence (docs/gpu-triage.md) --------------------------------
def _tf32(a):
    """a rounded to TF32 (10 explicit mantissa bits, to nearest) by XLA's own reduce_precision."""
    import jax
    return jax.lax.reduce_precision(a, exponent_bits=8, mantissa_bits=10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transformer_matmul_sensitivity_bounds_tf32_matmuls(seed):
    """The transformer block's dot_bound (first-order sensitivity to its matmuls) bounds what TF32
    matmuls do to it: the program with every matmul input rounded to TF32 (XLA:CPU's reduce_precision,
    not the replay) stays within (2u + u^2) * sensitivity plus the float32 budget of the exact
    program, and uses a fair part of it (the bound is not vacuous)."""
    import jax
    from conformance.cases import all_cases
    from conformance.checks import complies
    from spec import compliance as C
    case = all_cases("nightly")["programs/transformer_block/forward/float32"]
    inputs = case.make_inputs(seed)
    (mode,) = {m for m in case.modes_for([np.zeros((2, 8, 16), np.float32)])}
    assert mode.kind == C.ABS_REL and mode.dot_sensitivity and not mode.input_bits
    with jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):
        exact = np.asarray(case.fn(*inputs))
        tf32 = np.asarray(case.fn(*inputs, tap=lambda f, a, b: f(_tf32(a), _tf32(b))))
    (sens,) = case.dot_bound(*inputs)
    magnitude = max(float(np.abs(a).max()) for a in inputs)
    widened = dataclasses.replace(mode, input_bits=11)
    assert complies(widened, exact, tf32, magnitude=magnitude, bound=sens).all()
    assert not complies(mode, exact, tf32, magnitude=magnitude).all()      # TF32 needs the widening
    u = 2.0 ** -11
    assert np.max(np.abs(tf32.astype(np.float64) - exact) / ((2 * u + u * u) * sens)) > 0.01


def test_remat_grad_mode_bounds_the_cancellation_of_its_terms():
    """d/dy sin(y) y = sin(y) + y cos(y) with sin and cos each 8 ulp off the same way (the worst
    case of their budgets) complies with the case's derived ABS_REL mode; the ULP(8) it had before
    does not bound that result near the cancellation (y = 2.0424: terms near 0.9, result -0.037)."""
    from conformance.cases import all_cases
    from conformance.checks import complies
    from spec import compliance as C
    case = all_cases("quick")["control_flow/remat_grad/float32"]
    y = np.array([2.042443, 2.0287578, -1.5, 0.25, 3.0, -2.9], np.float32)
    y64 = y.astype(np.float64)
    exact = (np.sin(y64) + y64 * np.cos(y64)).astype(np.float32)
    eps = 2.0 ** -23
    worst = (np.sin(y64) * (1 + 8 * eps) + y64 * np.cos(y64) * (1 - 8 * eps)).astype(np.float32)
    (mode,) = set(case.modes_for([exact]))
    assert mode.kind == C.ABS_REL and mode.source == "first-order"
    assert complies(mode, exact, worst, magnitude=float(np.abs(y).max())).all()
    assert not complies(C.ulp(8, "xla-accuracy-budget"), exact, worst).all()
    # a result 1e-4 off (far more than the budgets allow) still fails
    assert not complies(mode, exact, exact + np.float32(1e-4), magnitude=float(np.abs(y).max())).any()


def test_exp2_f64_shifted_argument_divergence_is_that_model_only():
    """xla-gpu-exp2-f64-argument accepts exp of an argument within 4 ulp of fl(fl(ln 2) x), within
    2 ulp; not a result 6 ulp of the argument away, nor another runner or dtype."""
    x = np.array([34.99297383812594, -66.99744673793475, 12.947900062291396, 1.5], np.float64)
    y = np.float64(np.log(2.0)) * x
    ref = np.exp2(x)
    shifted = y.copy()
    for _ in range(2):
        shifted = np.nextafter(shifted, -np.inf)
    out = ref.copy()
    out[0] = np.exp(shifted[0])                     # the H100's value at x = 34.99...
    assert out[0] != ref[0]

    def failure(out, runner="xla:cuda"):
        return DV.Failure("lax_special/exp2/float64/33x65", runner, "0.11.2", ("exp2",), [ref], [out], (0,),
                          None, inputs=(x,))
    entry = DV.BY_ID["xla-gpu-exp2-f64-argument"]
    assert entry.matches(failure(out))
    assert not entry.matches(failure(out, runner="xla:cpu"))
    far = y[0]
    for _ in range(6):
        far = np.nextafter(far, -np.inf)
    out6 = ref.copy()
    out6[0] = np.exp(far)
    assert not entry.matches(failure(out6))
