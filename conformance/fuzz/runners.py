"""Runner lookup for the fuzzer: the suite's runners (hardware_runners), plus runners that modules
named in ``JAX_CONFORMANCE_RUNNERS`` (comma-separated module names, each with ``runners() ->
list[Runner]``) add, such as the mutant runners of ``conformance.fuzz.mutants``. The variable is
read in every process, so the isolated workers see the same runners as the campaign."""
from __future__ import annotations

import importlib
import os

ENV = "JAX_CONFORMANCE_RUNNERS"


def extra_runners() -> list:
    out = []
    for name in (m.strip() for m in os.environ.get(ENV, "").split(",")):
        if name:
            out.extend(importlib.import_module(name).runners())
    return out


def all_runners() -> list:
    from hardware_runners.base import all_runners as suite_runners
    return suite_runners() + extra_runners()


def get_runner(name: str):
    for r in all_runners():
        if r.name == name:
            return r
    raise KeyError(f"unknown runner {name!r}; known: {', '.join(r.name for r in all_runners())}")


def names() -> list[str]:
    return [r.name for r in all_runners()]
