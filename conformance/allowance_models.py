"""The suite's side of the backend allowances (spec/allowances.py): the mode changes and program
predicates an allowance names, and the search for the allowance that explains a difference."""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Callable

from spec import compliance as C
from spec import allowances as spec_allowances
from spec.allowances import Allowance

from .replay import SHADOW_OPS


def _matmul_precision(bits: int):
    """DOT_PRODUCT modes get inputs of ``bits`` significant bits; so do the ABS_REL modes of programs
    whose case gives its matmuls' first-order sensitivity (spec/compliance.py, ABS_REL)."""
    def change(mode: C.Mode) -> C.Mode:
        if mode.kind == C.DOT_PRODUCT:
            return C.dot_product(mode.k, mode.source, input_bits=bits)
        if mode.kind == C.ABS_REL and mode.dot_sensitivity:
            return dataclasses.replace(mode, input_bits=bits)
        return mode
    return change


def _faithful_f32(ulps: int):
    """EXACT float32/complex64 outputs may be ``ulps`` ulp from the correctly rounded value."""
    def change(mode: C.Mode) -> C.Mode:
        if mode.kind != C.EXACT:
            return mode
        return C.ulp(ulps, "gpu-f32-div-sqrt")
    return change


def _float32_div_sqrt(primitive: str, dtype: str, params) -> bool:
    if dtype not in ("float32", "complex64"):
        return False
    if primitive == "integer_pow":
        return params.get("y", 0) < 0          # XLA lowers x**-n as 1 / x**n: a division
    return primitive in ("div", "sqrt")


# The mode changes an allowance names (spec/allowances.py mode_change: (name, *arguments)).
MODE_CHANGES: dict[str, Callable[..., Callable[[C.Mode], C.Mode]]] = {
    "matmul_precision": _matmul_precision,
    "faithful_f32": _faithful_f32,
}
# The predicates an allowance's ``requires`` names: (primitive, output dtype name, params) -> bool.
REQUIRES: dict[str, Callable[[str, str, dict], bool]] = {
    "float32_matmul": lambda prim, dtype, params: (
        prim in ("dot_general", "conv_general_dilated", "ragged_dot_general")
        and dtype in ("float32", "complex64")),
    "float32_div_sqrt": _float32_div_sqrt,
    "scatter": lambda prim, dtype, params: prim == "scatter",
    "bfloat16_arithmetic": lambda prim, dtype, params: dtype == "bfloat16" and prim in SHADOW_OPS,
    "bfloat16_max_min_clamp": lambda prim, dtype, params: prim in ("max", "min", "clamp") and dtype == "bfloat16",
    "float64_select_and_gather_add": lambda prim, dtype, params: (
        prim == "select_and_gather_add" and dtype == "float64"),
}


def mode_change(a: Allowance) -> Callable[[C.Mode], C.Mode] | None:
    """The mode change ``a`` names, with its arguments (None: it changes no mode)."""
    if a.mode_change is None:
        return None
    name, *args = a.mode_change
    return MODE_CHANGES[name](*args)


def applies_to_program(a: Allowance, ops) -> bool:
    if a.requires is None:
        return True
    if ops is None:
        return a.kernels
    return any(REQUIRES[a.requires](*op) for op in ops)


def for_runner(runner: str) -> list[Allowance]:
    return [a for a in spec_allowances.ALLOWANCES if any(fnmatch.fnmatchcase(runner, p) for p in a.runners)]


def explain(runner: str, attempt: Callable[[dict | None, Callable | None, str], bool], ops=None) -> str | None:
    """The name of the first allowance (or '+'-joined combination) that explains a difference.

    ``ops``: the program's (primitive, output dtype name, params) triples (None: no program, a
    kernel), which decide the allowances that name the operations they need (``requires``).

    ``attempt(variant, mode_change, name)`` recomputes the comparison under one allowance (named
    ``name``, or the '+'-joined names of a combination) and says whether every output then
    complies. Single allowances are tried first, then all the applicable replay allowances
    together (FTZ and FMA often meet in one program).
    """
    applicable = [a for a in for_runner(runner) if applies_to_program(a, ops)]
    for a in applicable:
        if attempt(a.variant, mode_change(a), a.name):
            return a.name
    replays = [a for a in applicable if a.variant]
    if len(replays) > 1:
        merged: dict = {}
        for a in replays:
            merged.update(a.variant)
        name = "+".join(a.name for a in replays)
        if attempt(merged, None, name):
            return name
    return None
