"""The reference's own evaluation, watched equation by equation.

``observe(closed_jaxpr, args, watcher, key)`` evaluates a program with ``interp.eval_jaxpr`` under
an ``Options.observer`` that hands every step of every plan built under it (nested jaxprs
included: calls, loop bodies, branches, remat, custom rules, Pallas kernel bodies) to
``watcher.step(ctx, rule, invals, params)``. The watcher calls ``rule`` (the step as the plan
prepared it: the rule's ``prepare``d function inside the step hooks) or computes the result
another way; the plan has checked the equation's parameters when it was built and checks the
result against the equation's avals. The allowance replays (conformance/replay.py) and the
fused-vs-unfused comparison (conformance/fusion_diff.py) are such watchers: there is one
evaluation loop, interp/evaluator.py ``Plan.run``.
"""
from __future__ import annotations

import dataclasses
from typing import Hashable

import jax.extend.core as jcore

from interp.evaluator import eval_jaxpr
from interp.options import Options
from interp.schedule import context

# Calls: their value is their body's, on their operands (a watcher may treat them as transparent).
CALLS = ("jit", "pjit", "closed_call", "core_call")


def call_body(eqn):
    """The jaxpr a call equation evaluates (None where it names none)."""
    for key in ("jaxpr", "call_jaxpr"):
        if key in eqn.params:
            return eqn.params[key]
    return None


def holds_jaxprs(eqn) -> bool:
    """Whether an equation evaluates sub-jaxprs (calls, loops, conditionals, remat...)."""
    for v in eqn.params.values():
        for sub in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(sub, (jcore.Jaxpr, jcore.ClosedJaxpr)):
                return True
    return False


@dataclasses.dataclass(frozen=True)
class _Observer:
    """interp Options.observer: every step goes through the active watcher's ``step``.

    The observer itself is part of the hashable Options, so the plans built under one key are
    reused by every later evaluation with that key; its wrapped steps find the watcher of the
    evaluation running on their thread in ``interp.schedule.context.watcher`` (cores and
    interpreted devices, which may run on threads of their own, start with the watcher of the
    thread that started their schedule)."""
    key: Hashable

    def wrap(self, ctx, rule):
        def observed(ctx, *invals, **params):
            return context.watcher.step(ctx, rule, invals, params)
        return observed


def observe(closed_jaxpr, args, watcher, key: Hashable, options: Options | None = None) -> list:
    """``interp.eval_jaxpr(closed_jaxpr, *args)`` under ``options``, with every equation it
    evaluates (nested ones included) handed to ``watcher.step``. Evaluations with equal ``key``
    and options share their plans (the key tells watchers' plans apart)."""
    opts = dataclasses.replace(options or Options(), observer=_Observer(key))
    previous = context.watcher
    context.watcher = watcher
    try:
        return eval_jaxpr(closed_jaxpr, *args, options=opts)
    finally:
        context.watcher = previous


def as_outputs(ctx, result) -> list:
    """A rule's result as the list of the equation's outputs."""
    return list(result) if ctx.primitive.multiple_results else [result]

