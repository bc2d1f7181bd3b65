"""Semantics of the Mosaic GPU dialect of Pallas (``jax.experimental.pallas.mosaic_gpu``) as the
reference implements it (``interp/rules/pallas_mosaic_gpu.py``; blocks, warpgroups, barriers
and asynchronous operations in ``interp/pallas/warpgroups.py``).

Anchors: JAX's Mosaic GPU primitives and their lowering (``jax/_src/pallas/mosaic_gpu/
primitives.py``, ``lowering.py``, ``core.py``), the Mosaic GPU library they lower to
(``jax/experimental/mosaic/gpu/``), and NVIDIA's PTX ISA (https://docs.nvidia.com/cuda/
parallel-thread-execution/): sections 9.7.9.25 (cp.async.bulk.tensor: TMA), 9.7.13.15 (mbarrier),
9.7.15 (wgmma.mma_async, wgmma.commit_group, wgmma.wait_group) and the memory consistency model
(chapter 8: async proxy, mbarrier release/acquire). Where these leave a result undefined the
reference raises an UndefinedBehaviorError subclass naming kernel, block, warpgroup and buffer.

Names and parameters per JAX version are listed in ``interp/rules/pallas_mosaic_gpu.py``.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, Semantics, table

_PRIMS = "jax/_src/pallas/mosaic_gpu/primitives.py"
_LOWER = "jax/_src/pallas/mosaic_gpu/lowering.py"
_CORE = "jax/_src/pallas/mosaic_gpu/core.py"
_PTX_TMA = "PTX ISA 9.7.9.25 cp.async.bulk.tensor (TMA); 9.7.9.24 cp.async.bulk.commit_group / wait_group"
_PTX_MBAR = "PTX ISA 9.7.13.15 mbarrier (phases, arrival counts, expect-tx / complete-tx)"
_PTX_WGMMA = "PTX ISA 9.7.15 wgmma.mma_async, wgmma.commit_group, wgmma.wait_group"
_PTX_MODEL = "PTX ISA chapter 8 memory consistency model (async proxy, mbarrier release/acquire)"

# Every asynchronous operation completes at issue in the reference (its data is where it will be);
# what a program may not do before it observed the completion is undefined behaviour.
UNDEFINED = {
    "tma-read-before-barrier": "an access by a warpgroup to SMEM a TMA copy writes, before that "
                               "warpgroup observed the completion of the barrier phase the copy "
                               "arrives on (directly by barrier_wait, or through barriers whose "
                               "arrivals observed it): AsyncAccessError",
    "smem-write-under-tma-store": "a write to SMEM a TMA store (copy_smem_to_gmem) of the same "
                                  "warpgroup still reads, before wait_smem_to_gmem retired its "
                                  "group: AsyncAccessError",
    "accumulator-before-wgmma-wait": "an access to an accumulator a wgmma still writes, before "
                                     "wgmma_wait (or a waiting accumulator read): AsyncAccessError",
    "smem-write-under-wgmma": "a write to an SMEM operand of a wgmma in flight: AsyncAccessError",
    "smem-race-between-warpgroups": "an access to SMEM another warpgroup wrote, with no barrier "
                                    "phase ordering the write before it (the writer arrived "
                                    "after writing, the accessor observed that phase, directly "
                                    "or through other barriers): WarpgroupRaceError (a RaceError)",
    "barrier-deadlock": "a barrier_wait no arrival can complete (arrival counts or copies that do "
                        "not match): DeadlockError, reported instead of hanging",
    "barrier-skipped-phase": "a wait for a phase after which another phase already completed (a "
                             "parity wait cannot tell them apart) or more arrivals than a phase "
                             "expects: BarrierError",
    "async-store-at-exit": "a warpgroup that ends with TMA stores not retired by "
                           "wait_smem_to_gmem: AsyncAccessError",
}

SEMANTICS = table(
    Semantics(
        "mpmd_map (plgpu.kernel over a Mosaic GPU mesh)",
        "The body runs once per thread of the mesh: per grid point (a cluster), per block of the "
        "cluster and per warpgroup (num_threads / thread_name). axis_index / program_id give the "
        "coordinates over (*grid_names, *cluster_names, thread_name). Operands are GMEM refs. "
        "Clusters run one after another (row-major, or a seeded random order with "
        "grid_order='shuffled'): they synchronise with nothing but global memory. The "
        "warpgroups of a cluster run concurrently, synchronised only by barriers and waits: the "
        "reference runs them one at a time and switches at every wait that cannot proceed, so a "
        "kernel whose result depends on the schedule shows it under grid_order='shuffled'.",
        edge_cases=tuple(f"{k}: {v}" for k, v in UNDEFINED.items()),
        sources=(_CORE + " Mesh, kernel", _LOWER + " lower_pipelined_jaxpr_to_module"),
    ),
    Semantics(
        "run_scoped (Mosaic GPU)",
        "Allocations per warpgroup, or per block shared by its warpgroups when collective_axes "
        "names the thread axis. Accumulators (plgpu.ACC) start at zero; barriers at phase 0 "
        "with no arrivals; SMEM is never-written memory. Tiled / swizzled SMEM is held at its "
        "physical (tiled) shape; UntilingTransform, UnswizzleRef and "
        "ExpandLeadingBatchDimensionsTransform are views with the logical values (a swizzle "
        "permutes bytes within a tile row on the hardware and every access undoes it).",
        sources=(_LOWER + " _run_scoped_lowering_rule (mgpu.WGMMAAccumulator.zero)",
                 _CORE + " UntilingTransform, UnswizzleRef, ExpandLeadingBatchDimensionsTransform"),
    ),
    Semantics(
        "copy_gmem_to_smem",
        "TMA copy src (GMEM, through its transforms) -> dst (SMEM): the issuing warpgroup "
        "arrives once on the barrier with expect-tx of the copy's bytes; the copy's complete-tx "
        "follows. A false predicate skips both. dst is in flight until the barrier phase is "
        "observed (UNDEFINED['tma-read-before-barrier']).",
        edge_cases=("collective_axes (multicast, partitioned copies) and copies without a barrier "
                    "(cp.async) are refused",
                    "a source outside its array raises OutOfBoundsError (OOBFillMode is not "
                    "modelled)"),
        sources=(_PRIMS + " copy_gmem_to_smem, _copy_gmem_to_smem_lowering", _PTX_TMA, _PTX_MBAR),
    ),
    Semantics(
        "copy_smem_to_gmem",
        "TMA store src (SMEM) -> dst (GMEM), or with reduction_op add/min/max dst op= src (in "
        "dst's dtype). commit_group=True closes a bulk async-group with every uncommitted "
        "store; the SMEM source stays in flight until wait_smem_to_gmem retires the group.",
        sources=(_PRIMS + " copy_smem_to_gmem", _PTX_TMA),
    ),
    Semantics("commit_group", "Closes a bulk async-group of this warpgroup's uncommitted TMA "
              "stores.", sources=(_PRIMS, _PTX_TMA)),
    Semantics("wait_smem_to_gmem", "At most n committed store groups of this warpgroup stay in "
              "flight (n: parameter, or operand on JAX 0.10.2); wait_read_only changes nothing in "
              "the reference (stores write at issue).", sources=(_PRIMS, _PTX_TMA)),
    Semantics("commit_smem", "fence.proxy.async: orders the warpgroup's SMEM writes before later "
              "TMA reads. No value effect in the reference (TMA reads see every earlier write).",
              sources=(_PRIMS, _PTX_MODEL)),
    Semantics("barrier_arrive", "One arrival on the barrier (a false predicate: none). A phase "
              "completes when its num_arrivals arrived and no transaction bytes are pending; "
              "the arrival carries what the arriving warpgroup observed.",
              sources=(_PRIMS, _PTX_MBAR, _PTX_MODEL)),
    Semantics("barrier_wait", "The warpgroup's k-th wait on a barrier waits for phase k to "
              "complete (Mosaic GPU tracks the phase parity per thread); the warpgroup then "
              "observes what that phase's arrivals observed.",
              edge_cases=(UNDEFINED["barrier-deadlock"], UNDEFINED["barrier-skipped-phase"]),
              sources=(_PRIMS, _PTX_MBAR)),
    Semantics("barrier_arrive_and_wait", "barrier_arrive then barrier_wait (JAX >= 0.12).",
              sources=(_PRIMS,)),
    Semantics(
        "wgmma_ref",
        "acc += a @ b on 16-bit float operands (a from SMEM or registers, b from SMEM, through "
        "their transforms), asynchronous until wgmma_wait. Every product of two f16/bf16 values "
        "is exact in float64; their sum and the accumulator are added in float64 and rounded "
        "once to the accumulator's dtype (the PTX ISA leaves the accumulation order and "
        "intermediate precision to the implementation; the backend is held to DOT_PRODUCT).",
        edge_cases=(UNDEFINED["accumulator-before-wgmma-wait"], UNDEFINED["smem-write-under-wgmma"],
                    "integer and fp8 operands are refused"),
        sources=(_PRIMS + " wgmma", _PTX_WGMMA), exactness=CORRECTLY_ROUNDED,
    ),
    Semantics("wgmma", "The value form of wgmma_ref (after run_state discharge): acc + a @ b, "
              "numerics as wgmma_ref.", sources=(_PRIMS,), exactness=CORRECTLY_ROUNDED),
    Semantics("run_state (Mosaic GPU)", "plgpu.ACC.init(value) in pl.run_state: the body runs on "
              "an accumulator holding the value (refs the body closes over are the kernel's own "
              "memory), then every wgmma of the warpgroup is awaited, as Mosaic GPU's lowering "
              "ends the body with wgmma.wait_group 0.",
              sources=(_LOWER + " _run_state_lowering_rule ('Await the accumulators')",)),
    Semantics("wgmma_wait", "At most n wgmma of this warpgroup stay in flight (n: parameter, or "
              "operand on JAX 0.10.2). Each wgmma is its own group (primitives.py wgmma_wait: "
              "'no more than n WGMMA operations in flight').", sources=(_PRIMS, _PTX_WGMMA)),
    Semantics("wgmma_accumulator_deref", "Waits as wgmma_wait(wait_n) (None: no wait), then "
              "reads the accumulator; wgmma_accumulator_deref_p on JAX <= 0.11.",
              edge_cases=(UNDEFINED["accumulator-before-wgmma-wait"],), sources=(_PRIMS,)),
    Semantics("wgmma_accumulator_store", "Writes a value into the accumulator "
              "(wgmma_accumulator_store_p on JAX <= 0.11).", sources=(_PRIMS,)),
    Semantics("layout_cast", "The value unchanged: a register layout says how a value is spread "
              "over threads.", sources=(_PRIMS,)),
    Semantics("set_max_registers", "No value effect (setmaxnreg); set_max_registers_p with n as "
              "an operand on JAX 0.10.2, as a parameter on 0.11.", sources=(_PRIMS,)),
    Semantics("print_layout", "No value effect: evaluated at compile time.", sources=(_PRIMS,)),
    Semantics("async_prefetch", "No value effect: an L2 prefetch.", sources=(_PRIMS,)),
    Semantics("griddepcontrol_wait", "No value effect for one kernel alone (programmatic "
              "dependent launch).", sources=(_PRIMS,)),
    Semantics("griddepcontrol_launch_dependents", "No value effect for one kernel alone.",
              sources=(_PRIMS,)),
    Semantics("_copysign", "copysign(x1, x2), exact.", sources=(_LOWER + " _copysign",)),
    Semantics("load", "plgpu.load: the ref's elements through its transforms (the layout and "
              "optimized arguments do not change values).", sources=(_PRIMS,)),
    Semantics("store", "plgpu.store: writes the value through the ref's transforms.",
              sources=(_PRIMS,)),
)

