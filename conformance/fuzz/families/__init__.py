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


def _pallas_triton(c: Choices) -> Program:
    from . import pallas_triton
    return pallas_triton.generate(c)


def _pallas_mosaic_gpu(c: Choices) -> Program:
    from . import pallas_mosaic_gpu
    return pallas_mosaic_gpu.generate(c)


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
    Family("pallas-triton", "pallas", _pallas_triton, "kernels in the Triton lowering's style: power-of-two "
           "blocks, plgpu.load/store with masks and other, dots of 16 or more at HIGHEST/DEFAULT precision, "
           "program_id/num_programs, fori_loop, outputs aliased to inputs, integer atomic add/max/min from every "
           "program, num_warps/num_stages; run on pallas:interpret and pallas:triton"),
    Family("pallas-mosaic-gpu", "pallas", _pallas_mosaic_gpu, "plgpu.kernel grids whose programs copy their "
           "blocks into SMEM by TMA (copy_gmem_to_smem, barrier_wait), compute elementwise on warpgroup arrays, "
           "store masked or not, commit_smem and copy back (copy_smem_to_gmem, wait_smem_to_gmem); run on "
           "pallas:gpu-interpret and pallas:mosaic-gpu"),
)}

# Families the issue asks for that have no generator yet (an error names them, never a silent skip).
PLANNED: dict[str, str] = {
    "spmd": "shard_map programs with collectives",
}


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
