"""``coverage()``: every primitive the installed JAX defines, and what the reference does with it."""
from __future__ import annotations

import importlib
import sys

from .registry import PARTIAL, REFUSED, RULES

# Modules whose import registers the primitives a JAX program can contain.
PRIMITIVE_MODULES = (
    "jax", "jax.numpy", "jax.lax", "jax.random", "jax.experimental.pallas",
    "jax.experimental.pallas.tpu", "jax.experimental.pallas.triton",
    "jax.experimental.pallas.mosaic_gpu", "jax.experimental.pallas.fuser",
    "jax.experimental.shard_map",
)


def all_primitives() -> dict[str, list[str]]:
    """{primitive name: [defining modules]} for every Primitive reachable in the installed JAX."""
    import jax.extend.core as jcore
    for mod in PRIMITIVE_MODULES:
        try:
            importlib.import_module(mod)
        except Exception:  # an optional backend module that cannot import here
            pass
    found: dict[str, set] = {}
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("jax") or mod is None:
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, jcore.Primitive):
                found.setdefault(value.name, set()).add(modname)
    return {name: sorted(mods) for name, mods in sorted(found.items())}


def coverage() -> dict[str, str]:
    """{primitive name: "supported" | "partial: <what is missing>" | "unsupported" |
    "unsupported: <why the reference refuses it>"}."""
    from . import rules  # noqa: F401  (make sure every rule is registered)
    out = {}
    for name in all_primitives():
        if name in REFUSED:
            out[name] = f"unsupported: {REFUSED[name]}"
        elif name not in RULES:
            out[name] = "unsupported"
        elif name in PARTIAL:
            out[name] = f"partial: {PARTIAL[name]}"
        else:
            out[name] = "supported"
    return out


def is_supported(status: str) -> bool:
    """Whether a coverage() status means the reference evaluates the primitive (in part)."""
    return not status.startswith("unsupported")
