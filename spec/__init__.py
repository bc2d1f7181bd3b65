"""Data: the semantics the reference implements (per primitive, with sources), compliance modes,
ULP budgets, backend allowances, known-answer vectors and known divergences.

Family modules mirror ``interp/rules/``: ``spec/lax_elementwise.py`` states what
``interp/rules/lax_elementwise.py`` implements; each defines ``SEMANTICS`` (a dict by primitive).
"""
from __future__ import annotations

import importlib

from .base import Semantics

FAMILIES = (
    "lax_elementwise", "lax_special", "lax_conversions", "lax_structure", "lax_indexing",
    "lax_reductions", "lax_ordering", "lax_contractions", "lax_linalg",
    "control_flow", "state", "random", "spmd", "pallas", "pallas_tpu", "pallas_triton", "fusion",
)


def semantics() -> dict[str, Semantics]:
    """Every primitive's stated semantics, from all family modules."""
    out: dict[str, Semantics] = {}
    for family in FAMILIES:
        try:
            mod = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{family}":
                continue
            raise
        out.update(getattr(mod, "SEMANTICS", {}))
    return out
