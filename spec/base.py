"""The record every family's semantics table is made of."""
from __future__ import annotations

import dataclasses

# How exactly the reference defines a primitive's result.
EXACT = "exact"                          # one bit pattern is right (integers, bits, XLA-defined edge cases)
CORRECTLY_ROUNDED = "correctly-rounded"  # the exact real result rounded once to the output dtype
CONVENTION = "convention"                # results not unique (eigenvector signs...): a stated convention
EXACTNESS = (EXACT, CORRECTLY_ROUNDED, CONVENTION)


@dataclasses.dataclass(frozen=True)
class Semantics:
    """What one primitive computes, as the reference implements it, and where that is defined."""
    primitive: str
    summary: str
    edge_cases: tuple[str, ...] = ()   # exact statements, e.g. "int x / 0 == -1"
    sources: tuple[str, ...] = ()      # XLA operation semantics, StableHLO spec, JAX/XLA source paths
    exactness: str = EXACT
    notes: str = ""

    def __post_init__(self):
        if self.exactness not in EXACTNESS:
            raise ValueError(f"{self.primitive}: exactness must be one of {EXACTNESS}")


def table(*entries: Semantics) -> dict[str, Semantics]:
    out = {}
    for e in entries:
        if e.primitive in out:
            raise ValueError(f"duplicate semantics for {e.primitive}")
        out[e.primitive] = e
    return out
