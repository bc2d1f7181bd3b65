"""JAX version ranges, as divergences (``jax_versions``) and the peer suite's known differences
(``jax``) state them: [first version, first version it no longer applies), None open."""
from __future__ import annotations


def version_tuple(v: str) -> tuple:
    """'0.12.0.1' -> (0, 12, 0, 1); a part's non-digits are dropped ('0.11.1.dev2' -> (0, 11, 1, 2))."""
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def version_in(v: str, rng: tuple[str, str | None]) -> bool:
    lo, hi = rng
    return version_tuple(v) >= version_tuple(lo) and (hi is None or version_tuple(v) < version_tuple(hi))
