"""The choice stream a generator draws from: deterministic from a key, recorded, replayable, shrinkable.

A generator never calls a random number generator: it asks a :class:`Choices` for bounded integers
(``below(n)``), and every answer is recorded. The same key gives the same answers on every machine
and Python (SplitMix64 over a SHA-256 of the key: no dependence on NumPy's or Python's generators,
nor on ``PYTHONHASHSEED``). Replaying a recorded sequence (``Choices(prefix=...)``) regenerates the
same program; an edited sequence (smaller values, fewer of them) regenerates a simpler one, which
is how findings shrink (Hypothesis's idea, MacIver and Donaldson, ECOOP 2020: shrink the choices, so
every shrunk program is one the generator could have produced, well typed and free of undefined
behaviour by construction). Answers past the end of a prefix are 0, and a generator is written so
that 0 is always the simplest option (the first of a list, False, the smallest size).
"""
from __future__ import annotations

import hashlib
from typing import Sequence

_MASK = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def key_state(*parts) -> int:
    """A 64-bit state from key parts (strings and integers)."""
    text = "\0".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


class Choices:
    """Bounded integer choices: random from ``key`` (any parts), or replayed from ``prefix`` (then 0)."""

    def __init__(self, *key, prefix: Sequence[int] | None = None):
        self._state = key_state(*key) if key else None
        self.prefix = list(prefix) if prefix is not None else None
        self.record: list[int] = []

    def below(self, n: int) -> int:
        """An integer in [0, n); 0 is the simplest answer."""
        if n <= 1:
            if n < 1:
                raise ValueError("below(n) needs n >= 1")
            v = 0
        elif self.prefix is not None:
            i = len(self.record)
            v = min(self.prefix[i], n - 1) if i < len(self.prefix) else 0
        else:
            self._state, z = _splitmix64(self._state)
            v = z % n
        self.record.append(v)
        return v

    def choice(self, options: Sequence):
        """One of ``options`` (the first is the simplest)."""
        return options[self.below(len(options))]

    def weighted(self, options: Sequence[tuple[object, int]]):
        """One of ``options`` = [(value, integer weight), ...]; the first is the simplest."""
        total = sum(w for _, w in options)
        v = self.below(total)
        for value, w in options:
            if v < w:
                return value
            v -= w
        raise AssertionError("unreachable")

    def chance(self, percent: int) -> bool:
        """True with ``percent`` % probability; False is the simplest answer."""
        return self.below(100) >= 100 - percent

    def between(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]; lo is the simplest."""
        return lo + self.below(hi - lo + 1)
