"""Program families: one generator per family, looked up by name.

A family is a name, the kind of program it makes (``lax``: plain JAX programs, run under ``jit`` on
an XLA platform; ``pallas``: kernels, for the Pallas runners) and ``generate(choices) -> Program``.
Adding a family is adding an entry to :data:`FAMILIES` (a generator module beside this one).
Families named in :data:`PLANNED` are not implemented yet: asking for one is an error that says so.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..choices import Choices
from ..ir import Program


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    kind: str                                   # conformance.case kind: "lax" or "pallas"
    generate: Callable[[Choices], Program]
    summary: str
    devices: int = 1       # the most devices one of its programs runs on (XLA:CPU: host devices)


def _lax(c: Choices) -> Program:
    from . import lax
    return lax.generate(c)


def _control_flow(c: Choices) -> Program:
    from . import control_flow
    return control_flow.generate(c)


def _random(c: Choices) -> Program:
    from . import random
    return random.generate(c)


def _pallas(c: Choices) -> Program:
    from . import pallas
    return pallas.generate(c)


def _pallas_tpu(c: Choices) -> Program:
    from . import pallas
    return pallas.generate_tpu(c)


SPMD_DEVICES = 8       # the spmd family's largest mesh (conformance/isolation.py HOST_DEVICES has them)


def _spmd(c: Choices) -> Program:
    from . import spmd
    return spmd.generate(c)


def _state(c: Choices) -> Program:
    from . import state
    return state.generate(c)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("lax", "lax", _lax, "straight-line lax programs: elementwise and special functions, conversions "
           "through every dtype, structure, gather/scatter, reductions, windows, contractions, sort; "
           "compiler-rewrite idioms; jit boundaries; vmap and grad of the whole function"),
    Family("control_flow", "lax", _control_flow, "cond/switch, while, fori and scan around lax bodies"),
    Family("random", "lax", _random, "PRNG keys (threefry, both partitionable modes; rbg), split/fold_in, "
           "bits and samplers, rng_bit_generator with explicit algorithms"),
    Family("state", "lax", _state, "refs: new_ref, get/set/addupdate/swap with static and dynamic indices, "
           "refs written inside loops"),
    Family("pallas", "pallas", _pallas, "Pallas kernels: grids of 1-3 axes, BlockSpecs with revisits and partial "
           "edge blocks (masked loads), scalar prefetch, elementwise, dot, reductions, VMEM scratch, "
           "fori_loop, masked stores, accumulation over an 'arbitrary' axis; race-free by construction"),
    Family("pallas-tpu", "pallas", _pallas_tpu, "the pallas family's TPU kernels with inputs also copied in by "
           "local DMAs (pl.ANY operands, make_async_copy into VMEM, DMA semaphores), each waited for before use"),
    Family("spmd", "lax", _spmd, "shard_map over meshes of 1-2 axes (1-8 host devices): partitioned and "
           "replicated in/out specs, exact lax bodies, psum/pmax/pmin/psum_scatter (integers; floats only "
           "where every order is exact), all_gather, ppermute, all_to_all, axis_index", devices=SPMD_DEVICES),
)}

# Families the issue asks for that have no generator yet (an error names them, never a silent skip).
PLANNED: dict[str, str] = {
    "pallas-triton": "Pallas Triton kernels",
    "pallas-mosaic-gpu": "Pallas Mosaic GPU kernels",
}


def host_devices(names) -> int:
    """The devices the families' programs need (a campaign's workers get that many)."""
    return max([FAMILIES[n].devices for n in names if n in FAMILIES] or [1])


class UnknownFamily(ValueError):
    pass


def get(name: str) -> Family:
    if name in FAMILIES:
        return FAMILIES[name]
    if name in PLANNED:
        raise UnknownFamily(f"family {name!r} ({PLANNED[name]}) has no generator yet; "
                            f"implemented: {', '.join(FAMILIES)}")
    raise UnknownFamily(f"unknown family {name!r}; implemented: {', '.join(FAMILIES)}; "
                        f"planned: {', '.join(PLANNED)}")
