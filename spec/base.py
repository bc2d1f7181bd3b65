"""The record every family's semantics table is made of.

Every edge case or precondition of an entry is labelled, in the manner of the StableHLO spec's
(C1), (C2), ...: ``pad/c3`` is the third statement of pad's entry. The rule's error that enforces
a statement cites its id in its message and the test that checks it carries the id in its name
(``test_pad_c3_...``), so ``grep -r 'pad/c3\\|pad_c3'`` finds the sentence, the check and the test.
A statement several primitives share (a Mosaic GPU undefined behaviour any access can trip) has
one id of its own, ``<scope>/<name>``, the same text wherever it is listed.
"""
from __future__ import annotations

import dataclasses
import re
import types
from typing import Mapping

# How exactly the reference defines a primitive's result.
EXACT = "exact"                          # one bit pattern is right (integers, bits, XLA-defined edge cases)
CORRECTLY_ROUNDED = "correctly-rounded"  # the exact real result rounded once to the output dtype
CONVENTION = "convention"                # results not unique (eigenvector signs...): a stated convention
EXACTNESS = (EXACT, CORRECTLY_ROUNDED, CONVENTION)

# A statement's id: "<primitive>/c<n>" (numbered within its entry), or "<scope>/<kebab-name>" for
# a statement shared by several entries.
STATEMENT_ID = re.compile(r"[a-z_][a-z0-9_-]*/[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclasses.dataclass(frozen=True)
class Semantics:
    """What one primitive computes, as the reference implements it, and where that is defined."""
    primitive: str
    summary: str
    # {id: exact statement}, e.g. {"div/c1": "signed int: truncating; x / 0 == -1; ..."}
    edge_cases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    sources: tuple[str, ...] = ()      # XLA operation semantics, StableHLO spec, JAX/XLA source paths
    exactness: str = EXACT
    notes: str = ""

    def __post_init__(self):
        if self.exactness not in EXACTNESS:
            raise ValueError(f"{self.primitive}: exactness must be one of {EXACTNESS}")
        if not isinstance(self.edge_cases, Mapping):
            raise TypeError(f"{self.primitive}: edge_cases must map statement ids to statements")
        for sid, statement in self.edge_cases.items():
            scope, _, label = sid.partition("/")
            numbered = re.fullmatch(r"c[0-9]+", label)
            if not STATEMENT_ID.fullmatch(sid) or (numbered and scope != self.primitive):
                raise ValueError(f"{self.primitive}: statement id {sid!r} is not "
                                 f"'{self.primitive}/c<n>' nor a shared '<scope>/<name>'")
            if not isinstance(statement, str) or not statement:
                raise ValueError(f"{self.primitive}: statement {sid} is empty")
        object.__setattr__(self, "edge_cases", types.MappingProxyType(dict(self.edge_cases)))


def shared(statements: Mapping[str, str], *ids: str) -> dict[str, str]:
    """The statements ``ids`` of a table of shared statements, to list in an entry's edge_cases."""
    return {sid: statements[sid] for sid in ids}


def table(*entries: Semantics) -> dict[str, Semantics]:
    out = {}
    for e in entries:
        if e.primitive in out:
            raise ValueError(f"duplicate semantics for {e.primitive}")
        out[e.primitive] = e
    return out
