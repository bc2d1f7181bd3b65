"""The fuzzer's oracle (conformance/fuzz/oracle.py) on XLA:CPU and on mutant runners (XLA:CPU with
one injected bug each): exact programs pass exactly, programs with inexact operations pass on the
operations' own budgets, and each injected bug is found at its equation and nothing else is."""
from __future__ import annotations

import numpy as np
import pytest
import jax
from jax import lax

import interp
from conformance import checks
from conformance.fuzz import equation, flow, localize, mutants, oracle, program
from hardware_runners import get_runner
from conformance.fuzz.suite import Case
from spec import compliance as C


def _judge(fn, inputs, runner):
    case = Case(id="t", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"))
    with case.context(), np.errstate(all="ignore"):
        ref = [np.asarray(r) for r in interp.interpret(fn)(*inputs)]
        return oracle.judge(fn, inputs, ref, runner, case=case)


def _floats(n=4096, seed=0, lo=-3.0, hi=3.0):
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)


def test_exact_program_passes_bit_for_bit():
    x, y = _floats(), _floats(seed=1)
    rec = _judge(lambda x, y: (lax.max(lax.mul(x, y), lax.neg(x)), lax.convert_element_type(x, np.int32)),
                 [x, y], get_runner("xla:cpu"))
    assert rec["outcome"] == "pass", rec


def test_inexact_operations_are_judged_on_their_own_budgets():
    # XLA:CPU's exp is not correctly rounded everywhere on 4096 arguments; what follows an exp must
    # then follow from the backend's own exp values exactly (level 2 of the oracle).
    x = _floats()
    fn = lambda x: (lax.sub(lax.mul(lax.exp(x), np.float32(3)), x),)   # noqa: E731
    with np.errstate(all="ignore"):
        ref = interp.interpret(lambda x: lax.exp(x))(x)
    assert (np.asarray(jax.jit(lax.exp)(x)) != ref).any(), "XLA:CPU's exp is correctly rounded here: no test"
    rec = _judge(fn, [x], get_runner("xla:cpu"))
    assert rec["outcome"] == "pass-with-allowance" and rec["allowance"].startswith(equation.PER_OPERATION), rec


@pytest.fixture()
def mutant_runners(monkeypatch):
    monkeypatch.setenv("JAX_CONFORMANCE_RUNNERS", "conformance.fuzz.mutants")
    return {r.name: r for r in mutants.runners()}


@pytest.mark.parametrize("bug, fn, primitive, symptom", [
    ("add-ulp", lambda x, y: (lax.mul(lax.add(x, y), np.float32(2)),), "add", "value"),
    ("exp-far", lambda x, y: (lax.add(lax.exp(x), y),), "exp", "value"),
    ("max-drops-nan", lambda x, y: (lax.max(x, lax.log(y)),), "max", "nan"),
])
def test_each_injected_bug_is_found_at_its_equation(mutant_runners, bug, fn, primitive, symptom):
    x, y = _floats(seed=2), _floats(seed=3)
    runner = mutant_runners[f"mutant:{bug}"]
    rec = _judge(fn, [x, y], runner)
    assert rec["outcome"] == "fail", rec
    assert rec["bucket"] == f"fail:{primitive}:float32:mutant:{bug}:{symptom}", rec["bucket"]
    assert rec["first_divergent_eqn"]["primitive"] == primitive
    # the same program on XLA:CPU itself is explained
    assert _judge(fn, [x, y], get_runner("xla:cpu"))["outcome"] in ("pass", "pass-with-allowance")


def test_narrow_sums_are_bounded_at_their_own_precision():
    x = np.ones((64,), np.float16)
    closed = jax.make_jaxpr(lambda v: lax.reduce_sum(v, (0,)))(x)
    mode, = equation.eqn_modes(closed.jaxpr.eqns[0])
    assert (mode.kind, mode.k, mode.acc_bits) == (C.DOT_PRODUCT, 64, 11)
    closed = jax.make_jaxpr(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))))(
        np.ones((2, 5), np.float32), np.ones((5, 3), np.float32))
    mode, = equation.eqn_modes(closed.jaxpr.eqns[0])
    assert (mode.kind, mode.k, mode.acc_bits) == (C.DOT_PRODUCT, 5, 0)


def test_backend_crash_is_a_bucketed_record():
    class Crashing:
        name = "crashing"

        def run(self, case, inputs):
            raise RuntimeError("INTERNAL: something 1234 broke")
    rec = _judge(lambda x: (lax.neg(x),), [_floats(8)], Crashing())
    assert rec["outcome"] == "crash"
    assert rec["bucket"] == "crash:?:RuntimeError:crashing:INTERNAL: something # broke"


def test_intermediates_layout_counts_every_evaluation_of_a_shared_call():
    # jax.jit(g) called twice shares one inner jaxpr: its equations are evaluated twice, and the
    # localiser must take each evaluation's values in turn (the positions are per evaluation)
    g = jax.jit(lambda a: (lax.mul(a, np.float32(3)), lax.neg(a)))
    fn = lambda x, y: (lax.add(g(x)[0], g(y)[1]),)   # noqa: E731
    x, y = _floats(8, seed=4), _floats(8, seed=5)
    closed = jax.make_jaxpr(fn)(x, y)
    f, layout = localize._intermediates_fn(closed)
    values = f(x, y)
    positions = [q for evaluations in layout.values() for pos in evaluations for q in pos if q is not None]
    assert sorted(positions) == list(range(len(values)))
    mul = next(e for e in closed.jaxpr.eqns[0].params["jaxpr"].jaxpr.eqns if e.primitive.name == "mul")
    first, second = layout[id(mul)]
    assert np.array_equal(values[first[0]], x * np.float32(3)) and np.array_equal(values[second[0]], y * np.float32(3))


def test_terminal_operations_reach_outputs_only_through_bit_moves_and_calls():
    # exp -> neg -> output (inside a jit call too) is terminal; tanh -> add is not; a sum that is an
    # output is a terminal sum
    inner = jax.jit(lambda a: lax.neg(lax.exp(a)))
    fn = lambda x: (inner(x), lax.add(lax.tanh(x), x), lax.reduce_sum(x, (0,)))   # noqa: E731
    closed = jax.make_jaxpr(fn)(_floats(8))
    t = flow.terminal_operations(closed)
    names = {}
    def walk(j):
        for e in j.eqns:
            names[id(e)] = e.primitive.name
            for v in e.params.values():
                if hasattr(v, "jaxpr"):
                    walk(v.jaxpr)
    walk(closed.jaxpr)
    assert sorted(names[i] for i in t["eqns"]) == ["exp", "reduce_sum"]
    assert t["outputs"] == {0: C.ulp_budget("exp", np.float32)}
    assert list(t["sums"]) == [2]


def _dot_eqn(a, b):
    return jax.make_jaxpr(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))))(a, b).jaxpr.eqns[0]


def test_infinite_terms_leave_the_finite_ones_to_bound_the_order():
    # Row 0: -inf + 3e38 + 3e38 is -inf exactly (IEEE 754, an infinite term); summed in float32 in
    # the order (3e38 + 3e38) + -inf it is +inf + -inf = NaN: the finite terms reach the other
    # infinity. Row 1: -inf + 1 + 1 is -inf in every order. Row 2: a NaN term is NaN in every order.
    a = np.float32([[-np.inf, 3e38, 3e38], [-np.inf, 1, 1], [np.nan, 1, 1]])
    b = np.float32([[1], [1], [1]])
    eqn = _dot_eqn(a, b)
    mode, = equation.eqn_modes(eqn)
    bound = equation.abs_bound(eqn, [a, b])[0]
    np.testing.assert_array_equal(bound[:2, 0], [2 * np.float64(np.float32(3e38)), 2.0])
    assert np.isnan(bound[2, 0])
    ref = np.float32([[-np.inf], [-np.inf], [np.nan]])
    nan = np.float32([[np.nan], [np.nan], [np.nan]])
    ok = checks.complies(mode, ref, nan, bound=bound)
    assert ok[:, 0].tolist() == [True, False, True]
    # the same row with finite terms that cannot overflow in any order stays strict
    assert not checks.complies(mode, ref[1:2], np.float32([[0.0]]), bound=bound[1:2]).any()


def test_finite_terms_past_float64_give_the_largest_bound():
    a = np.float64([[1e300, -1e300]])
    b = np.float64([[1e300], [1e300]])
    with jax.enable_x64(True):
        eqn = _dot_eqn(a, b)
        bound = equation.abs_bound(eqn, [a, b])[0]
    assert bound[0, 0] == np.finfo(np.float64).max


def test_a_program_jax_does_not_implement_is_not_applicable_not_a_reference_crash():
    # Program lax/2026112901/788 of the 2026-11-29 campaigns: the gradient of a max pool with window
    # dilation, which JAX refuses while tracing (no VJP for select_and_gather with window dilation)
    from conformance.fuzz import evaluate
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)

    def fn(x):
        return jax.grad(lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 1), (1, 1), ((0, 0), (0, 0)),
                                                    (1, 1), (1, 2)).sum())(x)
    with pytest.raises(NotImplementedError, match="window dilation"):
        jax.make_jaxpr(fn)(x)
    case = Case(id="t", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"))
    ref, problem = evaluate.reference(case, [x])
    assert ref is None and problem["outcome"] == "backend-unsupported" and problem["not_applicable"], problem
    assert "bucket" not in problem and "window dilation" in problem["detail"]


def test_division_by_a_constant_inside_a_loop_is_the_known_reciprocal_divergence():
    """XLA:CPU's algsimp computes x / 5 as x * fl(1 / 5) inside a loop body too (the spmd family
    found it in a shard_map body): the whole program replayed so explains it, and nothing else is
    explained so (docs/findings.md, XLA:CPU: x / c is x * (1/c))."""
    x = np.array([-1.1046107e-03, 3.0, 0.7], np.float32)     # the first: one ulp apart

    def loop(x):
        return (lax.fori_loop(0, 1, lambda i, c: lax.div(c, np.float32(5.0)), x),)
    assert np.float32(np.float64(x[0]) / 5) != x[0] * (np.float32(1) / np.float32(5))
    rec = _judge(loop, [x], get_runner("xla:cpu"))
    assert rec["outcome"] == "known-divergence", rec
    assert rec["known_divergence"]["id"] == "xla-cpu-divide-by-constant-as-reciprocal", rec

    def loop_by_operand(x, y):      # a divisor that is neither a constant nor a broadcast: a quotient
        return (lax.fori_loop(0, 1, lambda i, c: lax.div(c, y), x),)
    y = np.full(3, 5.0, np.float32)
    ref = [np.asarray(r) for r in interp.eval_jaxpr(jax.make_jaxpr(loop_by_operand)(x, y), x, y)]
    bent = [ref[0] * 0 + x * (np.float32(1) / np.float32(5))]
    verdict = program.explain_program(program._Program(loop_by_operand), [x, y], bent, get_runner("xla:cpu"),
                                     reference=ref)
    assert not verdict.explained, verdict.record
