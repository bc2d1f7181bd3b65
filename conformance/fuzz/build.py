"""The builder families generate programs with: a pool of typed values, operands picked from it
(biased toward the value just computed, so chains form that a compiler fuses), fresh inputs where
nothing fits, and the operations appended as IR.

Values are handles (numbered in creation order, stable while building); :meth:`Builder.block`
numbers them the IR's way (parameters first, then results in op order).
"""
from __future__ import annotations

import math
from typing import Callable

from .choices import Choices
from .ir import DATA, INDEX, Block, Input, Op, Type, params

# Dimension sizes, simplest first: 1, small, non-divisible, powers of two, and zero (an edge case:
# zero-size arrays are legal everywhere and compilers special-case them).
DIMS = (1, 2, 3, 4, 5, 7, 8, 6, 16, 9, 13, 32, 0, 11, 64, 17)
MAX_ELEMENTS = 1024


def draw_shape(c: Choices, max_rank: int = 5, max_elements: int = MAX_ELEMENTS) -> tuple[int, ...]:
    """A shape of rank 0..max_rank (rank 0 simplest) with at most ``max_elements`` elements."""
    rank = c.weighted([(r, w) for r, w in ((0, 2), (1, 4), (2, 5), (3, 3), (4, 2), (5, 1)) if r <= max_rank])
    shape: list[int] = []
    for _ in range(rank):
        d = c.choice(DIMS)
        if math.prod(shape) * max(d, 1) > max_elements:
            d = 1
        shape.append(d)
    return tuple(shape)


class Builder:
    """One block under construction: its parameters (program inputs at the top level) and ops."""

    def __init__(self, c: Choices, params_: list[Type] | None = None, can_add_inputs: bool = True):
        self.c = c
        self.types: dict[int, Type] = {}
        self.params: list[int] = []
        self.inputs: list[Input] = []           # top level: how each parameter's values are drawn
        self.ops: list[tuple] = []              # (name, arg handles, params, out types, blocks, out handles)
        self.can_add_inputs = can_add_inputs
        self.last: int | None = None            # the most recent value (chains continue from it)
        self.used: set[int] = set()
        for t in params_ or ():
            self.params.append(self._new(t))

    def _new(self, t: Type) -> int:
        h = len(self.types)
        self.types[h] = t
        return h

    # -- values ----------------------------------------------------------------------------
    def input(self, type_: Type, kind: str = DATA, lo: int = 0, hi: int = 0, specials: int | None = None) -> int | None:
        """A new program input of ``type_`` (None inside a block, which cannot take new inputs)."""
        if not self.can_add_inputs:
            return None
        if specials is None:
            specials = self.c.choice((10, 0, 25, 50))
        self.inputs.append(Input(type_, kind, lo, hi, specials))
        h = self._new(type_)
        self.params.append(h)
        return h

    def index_input(self, shape, lo: int, hi: int, dtype: str = "int32") -> int | None:
        return self.input(Type(dtype, tuple(shape)), INDEX, lo, hi, 0)

    def pick(self, ok: Callable[[Type], bool], fresh: Callable[[], Type] | None = None) -> int | None:
        """A value whose type satisfies ``ok``: the last value if it does (half the time), else any;
        a new input of type ``fresh()`` when none does (None if none can be made)."""
        cands = [h for h, t in self.types.items() if ok(t) and not t.ref]
        if cands:
            if self.last in cands and self.c.below(2) == 0:
                return self.last
            return cands[self.c.below(len(cands))]
        if fresh is None:
            return None
        return self.input(fresh())

    def same_type(self, h: int) -> int | None:
        """An operand of value ``h``'s type (``h`` itself included), or a new input of that type."""
        t = self.types[h]
        return self.pick(lambda u: u == t, lambda: t)

    # -- ops -------------------------------------------------------------------------------
    def emit(self, name: str, args, outs, blocks=(), **p) -> list[int]:
        hs = [self._new(t) for t in outs]
        self.ops.append((name, tuple(args), params(**p), tuple(outs), tuple(blocks), tuple(hs)))
        self.used.update(args)
        if hs:
            self.last = hs[0]
        return hs

    def emit1(self, name: str, args, out: Type, blocks=(), **p) -> int:
        return self.emit(name, args, [out], blocks, **p)[0]

    def sinks(self) -> list[int]:
        """Values computed but not used (the natural outputs), most recent first."""
        computed = [h for op in self.ops for h in op[5]]
        return [h for h in reversed(computed) if h not in self.used and not self.types[h].ref]

    def block(self, outputs) -> Block:
        ids = {h: i for i, h in enumerate(self.params)}
        for op in self.ops:
            for h in op[5]:
                ids[h] = len(ids)
        ops = tuple(Op(name, tuple(ids[a] for a in args), p, outs, blocks)
                    for name, args, p, outs, blocks, _ in self.ops)
        return Block(tuple(self.types[h] for h in self.params), ops, tuple(ids[o] for o in outputs))
