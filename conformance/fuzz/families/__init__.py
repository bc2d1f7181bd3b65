"""Program families: one generator per family, looked up by name.

A family is a name, the kind of program it makes (``lax``: plain JAX programs, run under ``jit`` on
an XLA platform; ``pallas``: kernels, for the Pallas runners) and ``generate(choices) -> Program``:
the function ``function`` of the generator module ``module`` beside this one, imported when a
program is first asked for (a campaign of lax programs never imports Pallas).
Adding a family is adding a generator module and an entry to :data:`FAMILIES`; any other name is
an error that lists them.
"""
from __future__ import annotations

import dataclasses
import importlib

from ..choices import Choices
from ..ir import Program


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    kind: str              # conformance.case kind: "lax" or "pallas"
    module: str            # the generator module beside this one
    summary: str
    devices: int = 1       # the most devices one of its programs runs on (XLA:CPU: host devices)
    function: str = "generate"

    def generate(self, c: Choices) -> Program:
        return getattr(importlib.import_module(f".{self.module}", __package__), self.function)(c)


SPMD_DEVICES = 8       # the spmd family's largest mesh (conformance/isolation.py HOST_DEVICES has them)

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("lax", "lax", "lax", "straight-line lax programs: elementwise and special functions, conversions "
           "through every dtype, structure, gather/scatter, reductions, windows, contractions, sort; "
           "compiler-rewrite idioms; jit boundaries; vmap and grad of the whole function"),
    Family("control_flow", "lax", "control_flow", "cond/switch, while, fori and scan around lax bodies"),
    Family("random", "lax", "random", "PRNG keys (threefry, both partitionable modes; rbg), split/fold_in, "
           "bits and samplers, rng_bit_generator with explicit algorithms"),
    Family("state", "lax", "state", "refs: new_ref, get/set/addupdate/swap with static and dynamic indices, "
           "refs written inside loops"),
    Family("pallas", "pallas", "pallas", "Pallas kernels: grids of 1-3 axes, BlockSpecs with revisits and "
           "partial edge blocks (masked loads), scalar prefetch, elementwise, dot, reductions, VMEM scratch, "
           "fori_loop, masked stores, accumulation over an 'arbitrary' axis; race-free by construction"),
    Family("pallas-tpu", "pallas", "pallas", "the pallas family's TPU kernels with inputs also copied in by "
           "local DMAs (pl.ANY operands, make_async_copy into VMEM, DMA semaphores), each waited for before use",
           function="generate_tpu"),
    Family("pallas-triton", "pallas", "pallas_triton", "kernels in the Triton lowering's style: power-of-two "
           "blocks, plgpu.load/store with masks and other, dots of 16 or more at HIGHEST/DEFAULT precision, "
           "program_id/num_programs, fori_loop, outputs aliased to inputs, integer atomic add/max/min from every "
           "program, num_warps/num_stages; run on pallas:interpret and pallas:triton"),
    Family("pallas-mosaic-gpu", "pallas", "pallas_mosaic_gpu", "plgpu.kernel grids whose programs copy their "
           "blocks into SMEM by TMA (copy_gmem_to_smem, barrier_wait), compute elementwise on warpgroup arrays, "
           "store masked or not, commit_smem and copy back (copy_smem_to_gmem, wait_smem_to_gmem); run on "
           "pallas:gpu-interpret and pallas:mosaic-gpu"),
    Family("spmd", "lax", "spmd", "shard_map over meshes of 1-2 axes (1-8 host devices): partitioned and "
           "replicated in/out specs, exact lax bodies, psum/pmax/pmin/psum_scatter (integers; floats only "
           "where every order is exact), all_gather, ppermute, all_to_all, axis_index", devices=SPMD_DEVICES),
)}

def host_devices(names) -> int:
    """The devices the families' programs need (a campaign's workers get that many)."""
    return max([FAMILIES[n].devices for n in names if n in FAMILIES] or [1])


class UnknownFamily(ValueError):
    pass


def get(name: str) -> Family:
    if name in FAMILIES:
        return FAMILIES[name]
    raise UnknownFamily(f"unknown family {name!r}; implemented: {', '.join(FAMILIES)}")
