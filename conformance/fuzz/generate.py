"""A program from (family, seed, program index): the same program on every machine and JAX in range.

The choices come from a key of (family, seed, index) only (``conformance.fuzz.choices``); input
values from the same key (``conformance.fuzz.values``). Where the installed JAX lacks an API the
program needs, :func:`not_renderable` says so (the campaign records it; nothing is skipped silently).
"""
from __future__ import annotations

import dataclasses

from . import families
from .choices import Choices
from .ir import Program

GENERATOR_VERSION = 1     # raised whenever a change makes a (family, seed, index) give another program


def program_key(family: str, seed: int, index: int) -> str:
    return f"{family}/{seed}/{index}"


def generate(family: str, seed: int, index: int) -> tuple[Program, list[int]]:
    """(the program, the choices it was generated from)."""
    c = Choices("fuzz", GENERATOR_VERSION, family, seed, index)
    program = families.get(family).generate(c)
    program = dataclasses.replace(program, origin=(("index", index), ("seed", seed)))
    return program, c.record


def regenerate(family: str, choices: list[int]) -> Program:
    """The program a (possibly edited) choice sequence gives."""
    return families.get(family).generate(Choices(prefix=choices))
