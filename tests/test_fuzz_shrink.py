"""Shrinking shapes (conformance/fuzz/shrink.py): a finding's inputs cut to the few elements its
failure needs, with every type re-derived by JAX. The predicates are synthetic and judged on
XLA:CPU's own results (a NaN or an inf where the planted special values reach), so that what a
shrunk program keeps is what its failure needs, not what the shrinker assumes."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from conformance.fuzz import ir, render, values
from conformance.fuzz.generate import generate
from conformance.fuzz.ir import Block, Input, Op, Program, Type, params
from conformance.fuzz.shrink import Shrinker, dim_groups, retyped, sliced
from conformance.fuzz.shrink import TestCase as Case


def _program(inputs: list[Type], ops: list[Op]) -> Program:
    n = len(inputs) + sum(len(op.outs) for op in ops)
    return Program("lax", tuple(Input(t) for t in inputs), Block(tuple(inputs), tuple(ops), (n - 1,)))


def _outputs(tc: Case) -> list[np.ndarray]:
    return [np.asarray(o) for o in jax.jit(render.function(tc.program))(*tc.inputs)]


def _run_types_match(tc: Case) -> None:
    """The shrunk program runs, and its declared types are the ones JAX computes."""
    outs = _outputs(tc)
    types = tc.program.body.types()
    assert [o.shape for o in outs] == [types[v].shape for v in tc.program.body.outputs]
    assert [tuple(np.shape(x)) for x in tc.inputs] == [i.type.shape for i in tc.program.inputs]


def _shrink(tc: Case, symptom, *keep: str) -> tuple[Case, Shrinker]:
    """Shrink ``tc`` for as long as operations ``keep`` are in it and its output shows ``symptom``."""
    def still_fails(t: Case) -> bool:
        return set(keep) <= {op.name for op in t.program.body.ops} and bool(symptom(_outputs(t)[0]).any())

    def failing_output(t: Case):
        bad = np.argwhere(symptom(_outputs(t)[0]))
        return (0, tuple(int(i) for i in bad[0])) if len(bad) else None
    assert still_fails(tc)
    s = Shrinker(still_fails, lambda t: {}, failing_output, budget_s=120)
    small = s.shrink(tc)
    _run_types_match(small)
    assert still_fails(small)
    return small, s


def test_a_dot_shrinks_its_contracting_dimensions_on_both_operands_together():
    lhs, rhs = Type("float32", (3, 5, 7)), Type("float32", (5, 7, 16))
    dot = Op("dot_general", (0, 1), params(contract=((1, 2), (0, 1)), batch=((), ()), precision=None, preferred=None),
             (Type("float32", (3, 16)),))
    x = np.arange(105, dtype=np.float32).reshape(3, 5, 7) / 100
    x[1, 3, 4] = np.nan
    y = np.ones((5, 7, 16), np.float32)
    tc = Case(_program([lhs, rhs], [dot]), [x, y])
    assert {frozenset({(0, 1), (1, 0)}), frozenset({(0, 2), (1, 1)})} <= {frozenset(g) for g in dim_groups(tc.program)}
    assert sliced(tc, {(0, 1)}, 0, 2) is None        # one side of a contraction alone: JAX refuses it
    both = sliced(tc, {(0, 1), (1, 0)}, 0, 2)
    assert [i.type.shape for i in both.program.inputs] == [(3, 2, 7), (2, 7, 16)]
    small, _ = _shrink(tc, np.isnan, "dot_general")
    assert [i.type.shape for i in small.program.inputs] == [(1, 1, 1), (1, 1, 1)]
    assert np.isnan(small.inputs[0]).all()


def test_a_cumulative_sum_keeps_the_run_between_its_infinities():
    # a reverse cumsum along axis 0: inf + -inf at the rows between them; column 40 only
    t = Type("float16", (8, 64))
    cumsum = Op("cumulative", (0,), params(fn="cumsum", axis=0, reverse=True), (t,))
    x = np.ones((8, 64), np.float16)
    x[2, 40], x[5, 40] = -np.inf, np.inf
    small, _ = _shrink(Case(_program([t], [cumsum]), [x]), np.isnan, "cumulative")
    assert small.program.inputs[0].type.shape == (4, 1)
    assert list(small.inputs[0][[0, -1], 0]) == [-np.inf, np.inf]


def test_a_reduction_shrinks_to_its_one_nan():
    t = Type("float32", (6, 32))
    red = Op("reduce", (0,), params(fn="max", axes=(1,)), (Type("float32", (6,)),))
    x = np.linspace(-1, 1, 192, dtype=np.float32).reshape(6, 32)
    x[4, 17] = np.nan
    small, _ = _shrink(Case(_program([t], [red]), [x]), np.isnan, "reduce")
    assert small.program.inputs[0].type.shape == (1, 1) and np.isnan(small.inputs[0]).all()


def test_an_elementwise_operand_and_a_constant_shrink_with_the_input():
    t = Type("float32", (4, 8))
    ops = [Op("constant", (), params(shape=(4, 8), value=2.0, dtype="float32"), (t,)),
           Op("binary", (0, 1), params(fn="mul"), (t,)),
           Op("cumulative", (2,), params(fn="cumsum", axis=1, reverse=False), (t,))]
    x = np.ones((4, 8), np.float32)
    x[3, 6] = np.inf
    small, _ = _shrink(Case(_program([t], ops), [x]), np.isinf, "constant", "binary", "cumulative")
    assert small.program.inputs[0].type.shape == (1, 1) and np.isinf(small.inputs[0]).all()
    assert small.program.body.ops[0].p["shape"] == (1, 1)


@pytest.mark.parametrize("family", ["control_flow", "state", "lax"])
def test_types_rederived_through_jax_are_the_generators_own(family):
    # loops, branches, scans and refs: every block's parameters and results, from JAX's tracing,
    # agree with the types the generator built the program with
    checked = 0
    for i in range(12):
        p, _ = generate(family, 3, i)
        if render.why_not_renderable(p) or p.transform != ir.PLAIN:
            continue
        xs = values.make_inputs(p, f"{family}/3/{i}")
        assert retyped(p, xs) == ir.Program(**{**p.__dict__, "origin": ()}), (family, i)
        checked += 1
    assert checked >= 6


def test_a_broadcast_inside_a_block_follows_its_sliced_operand():
    t = Type("float32", (8,))
    body = Block((t,), (Op("broadcast_in_dim", (0,), params(shape=(8,), dims=(0,)), (t,)),
                        Op("binary", (0, 1), params(fn="mul"), (t,))), (2,))
    x = np.linspace(1, 2, 8, dtype=np.float32)
    x[5] = np.inf
    small, _ = _shrink(Case(_program([t], [Op("call", (0,), (), (t,), (body,))]), [x]), np.isinf, "call")
    assert small.program.inputs[0].type.shape == (1,) and np.isinf(small.inputs[0]).all()
    inner = small.program.body.ops[0].blocks[0]
    assert inner.params == (Type("float32", (1,)),) and inner.ops[0].p["shape"] == (1,)
