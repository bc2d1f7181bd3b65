"""Case families. Each module here defines ``cases() -> Iterable[Case]`` (every profile; a case's
``profile`` says the smallest profile that runs it). Adding a family is adding one module.

Extra modules (outside this package, e.g. a vendor's own cases or the project's tests) are named in
the environment variable ``JAX_CONFORMANCE_CASES`` (comma-separated module names).
"""
from __future__ import annotations

import importlib
import os
import pkgutil

from ..case import Case

PROFILES = ("quick", "nightly")
_cache: dict[tuple, dict[str, Case]] = {}


def family_modules() -> list[str]:
    mods = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    extra = [m.strip() for m in os.environ.get("JAX_CONFORMANCE_CASES", "").split(",") if m.strip()]
    return mods + extra


def all_cases(profile: str = "nightly") -> dict[str, Case]:
    """{case id: Case} of every family, up to ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}")
    key = (profile, tuple(family_modules()))
    if key not in _cache:
        rank = PROFILES.index(profile)
        out: dict[str, Case] = {}
        for modname in key[1]:
            try:
                mod = importlib.import_module(modname)
                family = [c for c in mod.cases() if PROFILES.index(c.profile) <= rank]
            except Exception as e:  # noqa: BLE001  (one broken family must not hide the others)
                family = [_broken_family(modname, e)]
            for case in family:
                if case.id in out:
                    raise ValueError(f"duplicate case id {case.id}")
                out[case.id] = case
        _cache[key] = out
    return _cache[key]


def _broken_family(modname: str, error: Exception) -> Case:
    """A case standing for a family module that failed to import or to generate its cases: it
    fails loudly (a crash record with the error) wherever it runs."""
    import traceback
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))[-3000:]

    def fail(*_):
        raise RuntimeError(f"case family {modname} is broken:\n{text}")
    return Case(id=f"{modname.rsplit('.', 1)[-1]}/module-error", fn=fail, inputs=lambda rng: [])


def get(case_id: str) -> Case:
    cases = all_cases("nightly")
    if case_id not in cases:
        raise KeyError(f"no case {case_id!r}")
    return cases[case_id]
