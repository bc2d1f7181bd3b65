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
_PTX_TCGEN05 = ("PTX ISA 9.7.16 tcgen05 (tcgen05.mma: D = A*B + D, or A*B with enable-input-d "
                "false; tcgen05.commit: the mbarrier tracks the completion of all prior "
                "asynchronous tcgen05 operations of the thread; tcgen05.ld / tcgen05.wait::ld; "
                "tcgen05.st / tcgen05.wait::st; tcgen05.cp)")
_PTX_CLC = ("PTX ISA 9.7.12.x clusterlaunchcontrol.try_cancel / query_cancel (cancel the launch of "
            "a cluster not yet started; 16-byte response with complete-tx on an mbarrier)")
_INTERPRET = "jax/_src/pallas/mosaic_gpu/interpret/shared_memory.py kernel_thread_finished"

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
                           "wait_smem_to_gmem: AsyncAccessError (JAX's own GPU interpret mode "
                           "raises the same: 'we believe that it is necessary and sufficient to "
                           "make sure the read side of any async smem to gmem copies have "
                           "completed before the kernel finishes'; the PTX ISA is not explicit. "
                           "JAX's shipped blackwell_matmul_mgpu ends its store warpgroup with "
                           "wait_smem_to_gmem(1) and trips it)",
    "tmem-read-before-commit": "an access by a thread to TMEM (or SMEM) a tcgen05 operation "
                               "(tcgen05_mma, async_copy_smem_to_tmem) writes, or a write to "
                               "SMEM it reads, before that thread observed a barrier phase a "
                               "commit of the issuing thread completes after the operation "
                               "(the mma's own barrier, or tcgen05_commit_arrive): "
                               "AsyncAccessError. The issuing thread's later tcgen05 operations "
                               "are ordered after it (the tensor pipe) and need no wait",
    "tmem-write-under-load": "a write of TMEM (async_store_tmem, tcgen05_mma, "
                             "async_copy_smem_to_tmem) an async_load_tmem may still read: before "
                             "the loading thread's wait_load_tmem, or by another thread not "
                             "ordered after that wait by a barrier: AsyncAccessError",
    "tmem-store-before-commit": "a read by a thread of TMEM it stored to with async_store_tmem "
                                "and no commit_tmem since: AsyncAccessError",
}

SEMAPHORE_NAMES = (
    "Mosaic GPU binds its own semaphore_signal and semaphore_wait primitives "
    "(jax/_src/pallas/mosaic_gpu/primitives.py semaphore_signal_p, semaphore_wait_p) under the "
    "names of Pallas's generic ones (jax/_src/pallas/primitives.py) that Mosaic TPU kernels "
    "bind. Both take args_tree over (semaphore, transforms, value, device_id, core_index) for "
    "signal and (semaphore, transforms, value, decrement) for wait, with the same meaning: "
    "signal adds value (to the semaphore of another core or device when named); wait blocks "
    "until the semaphore holds at least value, then subtracts it when decrement. Mosaic GPU "
    "adds memory_scope ('sys' or 'gpu'), the scope of the atomic: no value effect on one "
    "device. One rule per name serves both (interp/rules/pallas.py); a Mosaic GPU semaphore "
    "(plgpu.SemaphoreType) lives in GMEM, one per kernel launch shared by every block, where a "
    "TPU one is per core.")

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
        "names the thread axis; cluster copies, cluster barriers and collective MMAs reach "
        "the same allocation of another block of the cluster. Accumulators (plgpu.ACC) start at zero; barriers at phase 0 "
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
        edge_cases=("collective_axes, multicast (leader_tracked None): every block of the "
                    "collective group issues the copy and receives all of src; each block "
                    "arrives on its own barrier with expect-tx of all the bytes, and the slice "
                    "each block loads completes its bytes on every block's barrier (a block that "
                    "does not issue leaves the others' barriers waiting: a deadlock, reported)",
                    "collective_axes with leader_tracked=PARTITIONED(axis): block i receives the "
                    "i-th equal slice of src along dst's axis; only the leader (block 0 of the "
                    "group) arrives, expecting every slice's bytes, and every slice completes on "
                    "the leader's barrier; REPLICATED is refused (its byte accounting is not "
                    "stated)",
                    "copies without a barrier (cp.async) are refused",
                    "a source outside its array raises OutOfBoundsError (OOBFillMode is not "
                    "modelled)"),
        sources=(_PRIMS + " copy_gmem_to_smem, _copy_gmem_to_smem_lowering",
                 "jax/experimental/mosaic/gpu/launch_context.py async_copy (collective, "
                 "leader_tracked)", _PTX_TMA, _PTX_MBAR),
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
              "the arrival carries what the arriving warpgroup observed. A plgpu.ClusterBarrier "
              "is one barrier per block expecting num_arrivals from every block of its "
              "collective group; an arrival lands on the barrier of every block of the group "
              "(of the group's leader only, leader_tracked).",
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
        "is exact in float64; the exact sum of the products and the accumulator is rounded "
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
    Semantics(
        "tcgen05_mma",
        "acc (TMEM) = a @ b (accumulate false) or acc + a @ b, a from SMEM or TMEM, b from SMEM, "
        "through their transforms; f16, bf16 and fp8 operands. Every product is exact in "
        "float64; their sum and the accumulator are added in float64 and rounded once to the "
        "accumulator's dtype per instruction (the PTX ISA leaves the order and intermediate "
        "precision to the implementation; backends are held to DOT_PRODUCT). Asynchronous: done "
        "at issue, in flight until a commit of the issuing thread is observed; a barrier operand "
        "is a tcgen05.commit to it after the mma (one arrival).",
        edge_cases=(UNDEFINED["tmem-read-before-commit"], UNDEFINED["tmem-write-under-load"],
                    "collective_axis (2-CTA MMA): issued by the pair's leader block only (the "
                    "others' calls do nothing); block i's acc += block i's a @ [b of block 0 | "
                    "b of block 1]; a barrier operand is committed to both blocks' barriers",
                    "a_scale/b_scale (block-scaled) and a_sparse_metadata (sparse) are refused: "
                    "their TMEM layouts are not modelled; tf32 and integer kinds are refused"),
        sources=(_PRIMS + " tcgen05_mma", _LOWER, _PTX_TCGEN05), exactness=CORRECTLY_ROUNDED,
    ),
    Semantics("tcgen05_commit_arrive", "tcgen05.commit: one arrival on the barrier, after every "
              "tcgen05 operation the thread issued so far (a false predicate: none; JAX >= 0.12 "
              "has the predicate). Collective: the pair's leader commits to the barrier of both "
              "blocks (tcgen05.commit multicast, mask 0b11); the other block's call does nothing.", edge_cases=(UNDEFINED["tmem-read-before-commit"],),
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_copy_smem_to_tmem", "tcgen05.cp: the SMEM values (through their transforms) "
              "into TMEM; asynchronous like tcgen05_mma, and ordered before the thread's later "
              "tcgen05_mma reading it.", edge_cases=(UNDEFINED["tmem-read-before-commit"],
                                                    "collective copies are refused"),
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_load", "async_load_tmem (primitive async_load): the TMEM values through the "
              "ref's transforms, usable at once; the TMEM stays read until wait_load_tmem. "
              "reduce (JAX >= 0.11) also returns max / min / absmax / absmin along the last "
              "dimension (refused on data with NaN: the NaN rule depends on the lowering).",
              edge_cases=(UNDEFINED["tmem-write-under-load"], UNDEFINED["tmem-store-before-commit"]),
              sources=(_PRIMS + " async_load_tmem", _PTX_TCGEN05)),
    Semantics("wait_load_tmem", "tcgen05.wait::ld: the thread's TMEM loads are retired; its next "
              "barrier arrival carries that to other threads.", sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_store_tmem", "tcgen05.st: writes the value into TMEM; visible to the "
              "thread's loads and MMAs after commit_tmem.",
              edge_cases=(UNDEFINED["tmem-store-before-commit"], UNDEFINED["tmem-write-under-load"]),
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("commit_tmem", "tcgen05.wait::st: the thread's TMEM stores become visible.",
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics(
        "try_cluster_cancel",
        "Cluster launch control: asks to cancel the launch of a cluster that has not started and "
        "take its work. The reference launches clusters one after another: a request cancels "
        "the next cluster of that order while one is left (under grid_order='shuffled' a "
        "seeded random half of the requests fail instead, so kernels run under both outcomes); "
        "threads along collective_axes share one request. The first such thread arrives with "
        "expect-tx of the 16-byte response and the response completes it; the others arrive. "
        "The response is in flight until the barrier phase is observed.",
        edge_cases=(UNDEFINED["tma-read-before-barrier"],),
        sources=(_PRIMS + " try_cluster_cancel, try_cluster_cancel_lowering", _PTX_CLC)),
    Semantics("query_cluster_cancel", "Decodes the response: the grid indices (grid_names) of "
              "the cancelled cluster and whether the request succeeded; the indices of a "
              "failed request are undefined (PTX: get_first_ctaid is defined for a cancelled "
              "response only): -1, loud as an index.",
              sources=(_PRIMS + " query_cluster_cancel", _PTX_CLC)),
    Semantics("inline_mgpu", "Arbitrary Mosaic GPU IR has no semantics the reference can "
              "evaluate and is refused, except the two proxy fences JAX's "
              "dynamic_scheduling_loop emits through helpers.inline_ptx (fence.proxy.async "
              "acquire/release): ordering only, no value effect in the reference, whose accesses "
              "are in program order.", sources=("jax/_src/pallas/mosaic_gpu/helpers.py "
                                                "dynamic_scheduling_loop, inline_ptx", _PTX_MODEL)),
    Semantics("mpmd_map (plgpu.warp_map over a WarpMesh)", "A fork/join of the warpgroup's 4 "
              "warps, each running the body with its warp id (axis_index of the mesh's axis), "
              "concurrently with each other and the other warpgroups. A warp starts knowing what "
              "its warpgroup observed and having waited what it waited (its threads are the "
              "warpgroup's); at the join the warpgroup learns what every warp observed.",
              sources=(_LOWER + " _mpmd_map_lowering_rule ('a fork/join over individual warps "
                       "in a warpgroup')", "jax/_src/pallas/mosaic_gpu/helpers.py warp_map")),
    Semantics("semaphore_signal_parallel", "Each listed semaphore gets its increment, in no "
              "guaranteed order (the reference: the listed one); signals to other devices are "
              "refused.", edge_cases=(SEMAPHORE_NAMES,),
              sources=(_PRIMS + " semaphore_signal_parallel",)),
    Semantics("load", "plgpu.load: the ref's elements through its transforms (the layout and "
              "optimized arguments do not change values).", sources=(_PRIMS,)),
    Semantics("store", "plgpu.store: writes the value through the ref's transforms.",
              sources=(_PRIMS,)),
)

