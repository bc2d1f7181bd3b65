"""``coverage()``: every primitive the installed JAX defines, and what the reference does with it."""
from __future__ import annotations

import dataclasses
import importlib
import sys

from .registry import NO_RULE, PARTIAL, REFUSED, RULES

# Modules whose import registers the primitives a JAX program can contain.
PRIMITIVE_MODULES = (
    "jax", "jax.numpy", "jax.lax", "jax.random", "jax.experimental.pallas",
    "jax.experimental.pallas.tpu", "jax.experimental.pallas.triton",
    "jax.experimental.pallas.mosaic_gpu", "jax.experimental.pallas.fuser",
    "jax.experimental.shard_map", "jax.experimental.xla_metadata", "jax.experimental.layout",
    "jax.experimental.custom_partitioning",
    "jax.experimental.overlap",   # JAX 0.12 defines program_order_p only in jax._src.program_order
)


@dataclasses.dataclass(frozen=True)
class Releases:
    """The JAX releases that define a registered rule's primitive name: ``since <= version <
    until`` (None: open). ``why`` says what the other releases have instead."""
    why: str
    since: tuple[int, ...] | None = None
    until: tuple[int, ...] | None = None

    def defines(self, version: tuple[int, ...]) -> bool:
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


# Mosaic GPU primitives JAX 0.12 renamed from "<name>_p" to "<name>": both spellings, one entry each.
_RENAMED_IN_0_12 = {
    name: entry
    for n in ("inline_mgpu", "set_max_registers", "wgmma_accumulator_deref", "wgmma_accumulator_store")
    for name, entry in ((n, Releases(f"named {n}_p before JAX 0.12", since=(0, 12))),
                        (f"{n}_p", Releases(f"the primitive's name up to JAX 0.11; 0.12 names it {n}",
                                            until=(0, 12))))
}
_OLDEST = (0, 10, 2)   # the oldest supported JAX: a name gone before it is in no supported release
# Every registered rule name that some supported JAX (0.10.2 .. newest) does not define, and
# why. tests/test_versions.py checks each entry against the installed JAX (the name is defined
# exactly when the entry says so) and fails for any other registered name the installed JAX
# lacks: a rule never disappears silently behind a renamed primitive.
RULE_NAME_RELEASES = {
    # Older spellings, bound by no supported release (kept for jaxprs of older JAX).
    "pjit": Releases("older name of jit", until=_OLDEST),
    "checkpoint": Releases("older name of remat2", until=_OLDEST),
    "core_call": Releases("older call primitive; supported releases bind closed_call / eval_jaxpr",
                          until=_OLDEST),
    "custom_vjp_call_jaxpr": Releases("older form of custom_vjp_call", until=_OLDEST),
    "mutable_array": Releases("older name of new_ref", until=_OLDEST),
    # Renamed or replaced within the supported range.
    "call": Releases("JAX 0.11 merged core.call_p into eval_jaxpr (core.py: call_p = closed_call_p "
                     "= eval_jaxpr_p)", until=(0, 11)),
    **{n: Releases("JAX 0.10's hijax Box and Log primitives (jax/_src/hijax.py); JAX 0.11 "
                   "removed them", until=(0, 11))
       for n in ("new_box", "box_set", "box_get", "new_log", "log_extend")},
    "program_order": Releases("jax.experimental.overlap.program_order is new in JAX 0.11",
                              since=(0, 11)),
    "closed_call": Releases("JAX 0.11 binds eval_jaxpr (core.py: closed_call_p = eval_jaxpr_p)",
                            until=(0, 11)),
    "fusible": Releases("JAX 0.11's fuser.fusible is a call_hi_primitive (pallas/fuser/fusible.py)",
                        until=(0, 11)),
    "debug_barrier_p": Releases("the Triton debug barrier's name up to JAX 0.11; 0.12 renamed it "
                                "debug_barrier (pallas/triton/primitives.py)", until=(0, 12)),
    "debug_barrier": Releases("the Triton debug barrier is named debug_barrier_p before JAX 0.12",
                              since=(0, 12)),
    # Primitives new within the supported range.
    "log2": Releases("lax.log2_p is new in JAX 0.11 (older jnp.log2 lowers to log / log(2))",
                     since=(0, 11)),
    "one_minus_square": Releases("new in JAX 0.11 (lax.py)", since=(0, 11)),
    "relayout": Releases("new in JAX 0.11 (pjit.py explicit_layout)", since=(0, 11)),
    "xla_metadata_call": Releases("new in JAX 0.11 (jax.experimental.xla_metadata)", since=(0, 11)),
    "polynomial": Releases("lax.polynomial is new in JAX 0.12", since=(0, 12)),
    "has_memory_space": Releases("pltpu.has_memory_space is new in JAX 0.12", since=(0, 12)),
    "conv": Releases("pltpu.conv is new in JAX 0.11 (pallas/mosaic/primitives.py)", since=(0, 11)),
    "matmul_lhs_fifo": Releases("the MXU FIFO forms are new in JAX 0.11", since=(0, 11)),
    "matmul_pop_fifo": Releases("the MXU FIFO forms are new in JAX 0.11", since=(0, 11)),
    # Mosaic GPU (pallas/mosaic_gpu/primitives.py) and Pallas core (pallas/core.py).
    "mma": Releases("plgpu.mma (Ampere mma.sync) is new in JAX 0.11's Mosaic GPU", since=(0, 11)),
    "wait_gmem_to_smem": Releases("new in JAX 0.11's Mosaic GPU (plgpu.wait_gmem_to_smem, for "
                                  "cp.async copies)", since=(0, 11)),
    "core_map": Releases("JAX 0.10.2's pl.core_map / plgpu.warp_map primitive; from 0.11 both "
                         "bind mpmd_map", until=(0, 11)),
    "elementwise_inline_asm_p": Releases("Triton's inline asm primitive's name up to JAX 0.11",
                                         until=(0, 12)),
    "elementwise_inline_asm": Releases("named elementwise_inline_asm_p before JAX 0.12", since=(0, 12)),
    # SPMD (lax/parallel.py): the async starts of 0.10, the varying/unreduced casts renamed in 0.12.
    "psum_start": Releases("JAX 0.10's async psum start; 0.11 has no async collective pairs",
                           until=(0, 11)),
    "pbroadcast_start": Releases("JAX 0.10's async pbroadcast start", until=(0, 11)),
    "pbroadcast_done": Releases("JAX 0.10's async pbroadcast done", until=(0, 11)),
    "unreduced_psum_start": Releases("JAX 0.10's async unreduced psum start", until=(0, 11)),
    "unreduced_reduce_scatter_start": Releases("JAX 0.10's async unreduced reduce-scatter start",
                                               until=(0, 11)),
    "pbroadcast_dynamic": Releases("new in JAX 0.12", since=(0, 12)),
    "unreduced_pmax": Releases("new in JAX 0.11", since=(0, 11)),
    "unreduced_pmin": Releases("new in JAX 0.11", since=(0, 11)),
    "reduced_vary_cast_p": Releases("the cast's name up to JAX 0.11", until=(0, 12)),
    "reduced_vary_cast": Releases("named reduced_vary_cast_p before JAX 0.12", since=(0, 12)),
    "vary_unreduced_cast_p": Releases("the cast's name up to JAX 0.11", until=(0, 12)),
    "vary_unreduced_cast": Releases("named vary_unreduced_cast_p before JAX 0.12", since=(0, 12)),
    # Mosaic GPU (pallas/mosaic_gpu/primitives.py): _p names up to 0.11, new primitives in 0.12.
    **{n: Releases("new in JAX 0.12's Mosaic GPU", since=(0, 12))
       for n in ("barrier_arrive_and_wait", "mosaic_gpu_reduce_max", "mosaic_gpu_reduce_min",
                 "mosaic_gpu_reduce_prod", "mosaic_gpu_reduce_sum", "store")},
    **_RENAMED_IN_0_12,
}

# The JAX module whose import defines a rule family's primitives, where that import may fail in
# a supported environment (JAX 0.10.2's Mosaic GPU needs absl-py: the project's mosaic-gpu extra).
FAMILY_MODULES = {"interp.rules.pallas_mosaic_gpu": "jax.experimental.pallas.mosaic_gpu"}


def import_failure(rule_name: str) -> str | None:
    """Why the JAX module defining ``rule_name``'s family cannot be imported here, else None."""
    module = FAMILY_MODULES.get(getattr(RULES.get(rule_name), "__module__", None))
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001  (reported as the reason, never swallowed)
        return f"{module} does not import here ({type(e).__name__}: {e})"
    return None


def jax_version() -> tuple[int, ...]:
    import jax
    return tuple(int(p) for p in jax.__version__.split(".") if p.isdigit())


def rules_not_in_this_jax() -> dict[str, str]:
    """{registered rule name: why} for every rule whose primitive name the installed JAX does not
    define (coverage() lists only what it defines); "unexplained" for a name RULE_NAME_RELEASES
    does not account for."""
    from . import rules  # noqa: F401  (make sure every rule is registered)
    defined = all_primitives()
    return {name: (import_failure(name) or (RULE_NAME_RELEASES[name].why if name in RULE_NAME_RELEASES
                                            else "unexplained"))
            for name in sorted(RULES) if name not in defined}


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
            out[name] = f"unsupported: {NO_RULE[name]}" if name in NO_RULE else "unsupported"
        elif name in PARTIAL:
            out[name] = f"partial: {PARTIAL[name]}"
        else:
            out[name] = "supported"
    return out


def is_supported(status: str) -> bool:
    """Whether a coverage() status means the reference evaluates the primitive (in part)."""
    return not status.startswith("unsupported")
