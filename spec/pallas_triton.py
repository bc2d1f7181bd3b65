"""Semantics of the Pallas Triton primitives (``jax.experimental.pallas.triton``) as the reference
implements them (``interp/rules/pallas_triton.py``). Primitives every Pallas lowering shares
(masked loads and stores, program ids, ``multiple_of``) are in ``spec/pallas.py``.

Anchors: ``jax/_src/pallas/triton/primitives.py`` (the primitives, their discharge rules and
Triton lowerings) and ``jax/_src/pallas/triton/lowering.py`` (what the Triton lowering accepts).
"""
from __future__ import annotations

from .base import Semantics, table

_TRITON = "jax/_src/pallas/triton/primitives.py"

SEMANTICS = table(
    Semantics("max_contiguous", "Triton compiler hint; the value unchanged.",
              sources=(_TRITON,)),
    Semantics("atomic_rmw", "Triton atomics (xchg, add, max, min, and, or, xor) return the value "
              "each lane saw; lanes hitting one element apply in row-major lane order, each "
              "result rounded; masked-out lanes are not accessed.",
              sources=(_TRITON,),
              notes="Float max/min propagate NaN; Triton's integer-trick float min/max leaves NaN "
                    "handling undefined."),
    Semantics("atomic_cas", "Compare-and-swap of a scalar ref; returns the old value.",
              sources=(_TRITON,)),
    Semantics("debug_barrier", "Triton thread barrier: no effect on values.",
              sources=(_TRITON,)),
)
