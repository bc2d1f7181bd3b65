"""Data: the semantics the reference implements (per primitive, with sources), compliance modes,
ULP budgets, backend allowances, known-answer vectors and known divergences.

Family modules mirror ``interp/rules/``: ``spec/lax_elementwise.py`` states what
``interp/rules/lax_elementwise.py`` implements; each defines ``SEMANTICS`` (a dict by primitive,
``spec/base.py``) and, where JAX spells a primitive another way, ``ALIASES`` ({that name: the
primitive of its entry}). tests/test_spec_coverage.py holds the families to interp's and every
registered rule to one entry.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil

from .base import Semantics


@functools.cache
def families() -> tuple[str, ...]:
    """The family modules: the modules of this package that state semantics (``SEMANTICS``)."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg)
    return tuple(n for n in names if hasattr(importlib.import_module(f"{__name__}.{n}"), "SEMANTICS"))


def semantics() -> dict[str, Semantics]:
    """Every primitive's stated semantics, from all family modules."""
    out: dict[str, Semantics] = {}
    for family in families():
        out.update(importlib.import_module(f"{__name__}.{family}").SEMANTICS)
    return out


def aliases() -> dict[str, str]:
    """{another JAX spelling of a primitive (pjit, the "_p" names of JAX <= 0.11): the primitive
    whose entry states it}."""
    out: dict[str, str] = {}
    for family in families():
        out.update(getattr(importlib.import_module(f"{__name__}.{family}"), "ALIASES", {}))
    return out
