"""The rule table: one function per primitive name.

A rule is ``rule(eqn, *invals, *, <every parameter, by name>) -> value`` (or a sequence of values
for primitives with ``multiple_results``); never ``**params`` (interp/evaluator.py check_params). ``eqn`` is the equation's :class:`interp.evaluator.EqnContext`: its
``in_avals``/``out_avals``, the evaluation ``options``, and ``eval_jaxpr`` for sub-jaxprs.
Register with::

    @register("add")
    def add(eqn, x, y): ...
"""
from __future__ import annotations

from typing import Callable

RULES: dict[str, Callable] = {}
# Primitives whose rule exists but does not cover everything: name -> what is missing.
PARTIAL: dict[str, str] = {}
# Primitives the reference refuses on purpose (their rule raises UnsupportedPrimitiveError):
# name -> why. coverage() says "unsupported: <why>".
REFUSED: dict[str, str] = {}
# Rules applied when an equation involves extended dtypes (PRNG keys, semaphores):
# name -> rule with the same signature. Falls back to RULES when absent.
EXTENDED_RULES: dict[str, Callable] = {}


def register(*names: str, partial: str | None = None, extended: bool = False,
             refused: str | None = None):
    """Register the decorated function as the rule for each primitive name (``refused``: a rule
    that only raises, with the reason coverage() states)."""
    table = EXTENDED_RULES if extended else RULES

    def deco(fn):
        for name in names:
            if name in table:
                raise ValueError(f"duplicate rule for primitive {name!r}")
            table[name] = fn
            if partial:
                PARTIAL[name] = partial
            if refused:
                REFUSED[name] = refused
        return fn

    return deco
