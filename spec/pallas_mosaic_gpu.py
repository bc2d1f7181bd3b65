"""Semantics of the Mosaic GPU dialect of Pallas (``jax.experimental.pallas.mosaic_gpu``) as the
reference implements it (``interp/rules/pallas_mosaic_gpu.py``; blocks, warpgroups, barriers
and asynchronous operations in the engine ``interp/pallas/mosaic_gpu/``).

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

from .base import CORRECTLY_ROUNDED, EXACT, Semantics, shared, table

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
    "mosaic_gpu/tma-read-before-barrier": "an access by a warpgroup to SMEM a TMA copy writes, before "
                                          "that warpgroup observed the completion of the barrier phase "
                                          "the copy arrives on (directly by barrier_wait, or through "
                                          "barriers whose arrivals observed it): AsyncAccessError",
    "mosaic_gpu/smem-write-under-tma-store": "a write to SMEM a TMA store (copy_smem_to_gmem) of the "
                                             "same warpgroup still reads, before wait_smem_to_gmem "
                                             "retired its group: AsyncAccessError (by another "
                                             "warpgroup: copy_smem_to_gmem/c2)",
    "mosaic_gpu/accumulator-before-wgmma-wait": "an access to an accumulator a wgmma still writes, "
                                                "before wgmma_wait (or a waiting accumulator read): "
                                                "AsyncAccessError",
    "mosaic_gpu/smem-access-under-cp-async": "an access by the warpgroup to SMEM a cp.async copy "
                                             "(copy_gmem_to_smem without a barrier) still writes, "
                                             "before wait_gmem_to_smem retired its group: "
                                             "AsyncAccessError",
    "mosaic_gpu/smem-write-under-wgmma": "a write to an SMEM operand of a wgmma in flight (by the "
                                         "warpgroup, or by a TMA copy it issues), before a wgmma_wait "
                                         "retired that wgmma: AsyncAccessError. A later wgmma, even on "
                                         "the same accumulator, retires nothing (PTX ISA 9.7.15.4: "
                                         "wgmma.wait_group must be used to wait for completion; JAX's "
                                         "lowering emits no implicit wait). JAX's shipped "
                                         "ragged_dot_mgpu and transposed_ragged_dot_mgpu trip it once "
                                         "their pipeline refills a slot (docs/mosaic-gpu-findings.md)",
    "mosaic_gpu/smem-race-between-warpgroups": "an access to SMEM another warpgroup wrote, with no "
                                               "barrier phase ordering the write before it (the writer "
                                               "arrived after writing, the accessor observed that "
                                               "phase, directly or through other barriers), or to "
                                               "GMEM another warpgroup of the same cluster (any of "
                                               "its blocks) wrote, plainly or by a TMA store, with "
                                               "no barrier phase or semaphore signal/wait (a "
                                               "release/acquire pair) ordering them: "
                                               "WarpgroupRaceError (a RaceError). Between clusters: "
                                               "mosaic_gpu/gmem-race-between-clusters",
    "mosaic_gpu/gmem-race-between-clusters": "an access to GMEM (an operand, a GMEM scratch buffer) "
                                             "that a warpgroup of another cluster (grid point) of "
                                             "the same launch accessed, one of the two a write (a "
                                             "plain store, a TMA store), with no chain of semaphore "
                                             "signals and waits (release, acquire) ordering the "
                                             "two: ClusterRaceError (a RaceError) naming both "
                                             "accesses and both clusters, whichever came first in "
                                             "the schedule (a write after another cluster's read "
                                             "too). The blocks of a grid execute independently, in "
                                             "any order, in parallel or in series (CUDA C++ "
                                             "Programming Guide, 'Thread Hierarchy'; a thread "
                                             "block cluster co-schedules only its own blocks: "
                                             "'Thread Block Clusters'), so nothing but global "
                                             "memory orders two clusters (Mosaic GPU: "
                                             "semaphore_signal is red.release, semaphore_wait an "
                                             "ld.acquire loop; primitives.py memory_scope), and two "
                                             "conflicting accesses (overlapping, one a write) not "
                                             "in causality order are a data race unless both are "
                                             "morally strong (PTX ISA chapter 8, memory consistency "
                                             "model: 'Data races'): TMA reduction stores "
                                             "(cp.reduce.async.bulk, .relaxed.gpu atomic updates) "
                                             "do not race with each other, with plain accesses "
                                             "they do. Kernel launches are ordered by the stream; "
                                             "clusters of other devices use their own GMEM "
                                             "(mosaic_gpu/remote-race). JAX's GPU interpret mode "
                                             "runs clusters one after another and flags two "
                                             "clusters writing one location, not a write after "
                                             "another cluster's read",
    "mosaic_gpu/recorded-race": "under Options(on_race='record') (the drop-in mode where JAX's "
                                "detector warns or records: docs/pallas-mode.md) a race of a "
                                "Mosaic GPU kernel (WarpgroupRaceError, ClusterRaceError, "
                                "TmaRaceError, and the AsyncAccessError of an access to SMEM a "
                                "TMA copy still writes) is recorded "
                                "and the kernel goes on: every access, racing ones included, takes "
                                "effect when its warpgroup executes it, in the order the "
                                "reference's schedule runs the warpgroups (interp/schedule.py: "
                                "core order, or the seeded shuffle), and a TMA copy or store reads "
                                "and writes its data at issue. The result is one the schedule "
                                "gives, not a defined value",
    "mosaic_gpu/barrier-deadlock": "a barrier_wait no arrival can complete (arrival counts or copies "
                                   "that do not match): DeadlockError, reported instead of hanging",
    "mosaic_gpu/barrier-poll-deadlock": "a poll loop over barrier_test that can never end: a test "
                                        "answering False when the same thread's previous test of the "
                                        "same phase also answered False and nothing changed between "
                                        "them (no other thread or copy went on, the barrier's arrivals, "
                                        "pending bytes and completed phases as they were, the thread "
                                        "made no release: no arrival and no copy completing on a "
                                        "barrier): DeadlockError naming the thread, the barrier and the "
                                        "other waits (BARRIER_TEST)",
    "mosaic_gpu/barrier-skipped-phase": "a wait for a phase after which another phase already completed "
                                        "(a parity wait cannot tell them apart) or more arrivals than a "
                                        "phase expects: BarrierError",
    "mosaic_gpu/async-store-at-exit": "a warpgroup that ends with TMA stores not retired by "
                                      "wait_smem_to_gmem: AsyncAccessError (JAX's own GPU interpret "
                                      "mode raises the same: 'we believe that it is necessary and "
                                      "sufficient to make sure the read side of any async smem to gmem "
                                      "copies have completed before the kernel finishes'; the PTX ISA "
                                      "states no meaning for a CTA that exits with a bulk async-group "
                                      "outstanding (its shared memory, the store's source, is "
                                      "released), Mosaic GPU adds no wait at exit, and CUTLASS drains "
                                      "every TMA store before a kernel ends (sm90 epilogue store_tail). "
                                      "JAX's shipped blackwell_matmul_mgpu ends its store warpgroup "
                                      "with wait_smem_to_gmem(1) and trips it: "
                                      "docs/mosaic-gpu-findings.md)",
    "mosaic_gpu/tmem-read-before-commit": "an access by a thread to TMEM (or SMEM) a tcgen05 operation "
                                          "(tcgen05_mma, async_copy_smem_to_tmem) writes, or a write to "
                                          "SMEM it reads, before that thread observed a barrier phase a "
                                          "commit of the issuing thread completes after the operation "
                                          "(the mma's own barrier, or tcgen05_commit_arrive): "
                                          "AsyncAccessError. The issuing thread's later tcgen05 "
                                          "operations are ordered after it (the tensor pipe) and need "
                                          "no wait",
    "mosaic_gpu/tmem-write-under-load": "a write of TMEM (async_store_tmem, tcgen05_mma, "
                                        "async_copy_smem_to_tmem) an async_load_tmem may still read: "
                                        "before the loading thread's wait_load_tmem, or by another "
                                        "thread not ordered after that wait by a barrier: "
                                        "AsyncAccessError",
    "mosaic_gpu/tmem-store-before-commit": "a read by a thread of TMEM it stored to with "
                                           "async_store_tmem and no commit_tmem since: AsyncAccessError",
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

_UTILS = "jax/experimental/mosaic/gpu/utils.py"

BARRIER_TEST = (
    "barrier_test (plgpu.barrier_test, primitives.py barrier_test_p, lowered to "
    f"{_UTILS} BarrierRef.test / test_parity: mbarrier.test_wait.parity on the parity of the "
    "thread's next phase, reduced over the warpgroup (bar.red.or) or the warp (vote.any); when "
    "it answers true the thread's phase parity advances, as a wait's does) is whether the "
    "thread's next phase k of the barrier completed at the moment of the test (PTX ISA "
    "9.7.13.15.16 mbarrier.test_wait: a non-blocking test for the completion of the phase). True "
    "counts as the thread's k-th wait and observes what the phase's arrivals carried, as "
    "barrier_wait does. Phase k complete at the test: True, the only answer (a completed phase "
    "stays completed until the thread waits for it). Not complete, and no other thread or copy "
    "can go on: False, the only answer too. Not complete while other threads can go on: the "
    "answer depends on when the test runs among their steps, and neither the PTX ISA (chapter 8 "
    "states no progress order between threads) nor CUDA promises one. The reference answers as "
    "a test made as late as possible: the testing thread yields, every other thread that can go "
    "on (started, or a cluster not started yet) runs first, and the test answers True if they "
    "completed the phase, False when they all finished or wait; under grid_order='shuffled' a "
    "seeded half of these tests answer False at once (the test made before the others moved), "
    "so a kernel whose result depends on the answer shows it across seeds. Both answers are "
    "ones the hardware may give. JAX >= 0.11 lowers it in warpgroup and warp contexts; JAX "
    "0.10.2 in warp contexts only (inside plgpu.warp_map); the reference runs it in both. A poll "
    "loop that can never end is a deadlock: mosaic_gpu/barrier-poll-deadlock. Two identical "
    "fruitless tests are taken as a spin: a loop that would make progress of its own only "
    "after several such tests (a counter the reference cannot see) is reported too; whether a "
    "loop ends is undecidable in general. JAX's GPU interpret mode cannot run it (JAX 0.12.0.1: "
    "'TypeError: barrier must be a reference').")

CLUSTERS = (
    "Clusters (points of the grid) are concurrent, as on the hardware: every warpgroup of every "
    "cluster is a core of one schedule (interp/schedule.py: one thread at a time, switching "
    "at waits that cannot proceed). A cluster starts, all its warpgroups at once, when no "
    "started warpgroup can go on, in row-major order or a seeded random one "
    "(grid_order='shuffled'): most clusters therefore run one after another, and a cluster that "
    "waits on later ones (a persistent kernel whose blocks wait for every other block, as "
    "collective_matmul_mgpu's semaphore wait) gets them started beside it. A cluster's SMEM, "
    "barriers and warpgroup state live from its start to its last warpgroup's end. The "
    "reference puts no bound on the clusters alive at once: a kernel that waits on a cluster "
    "which could not be resident beside the waiting ones (more clusters than the device's SMs, "
    "or than fit by shared memory and registers) completes in the reference where the hardware "
    "would hang (CUDA guarantees co-residency of a grid only for cooperative launches: CUDA C++ "
    "Programming Guide, 'Grid Synchronization'). Inside a shard_map the clusters of every "
    "device's launch are cores of the same schedule; when none can go on, a cluster of the "
    "next device's launch starts before the next one of the running device's, so the devices "
    "progress side by side.")

_PTX_MULTIMEM = ("PTX ISA 9.7.9.x multimem.ld_reduce, multimem.st, multimem.red (NVLink "
                 "multicast memory: one access reaches every device's buffer the multicast "
                 "address maps; the reduction's operand order is not stated)")

MULTI_DEVICE = """Mosaic GPU kernels across devices (interp/pallas/devices.py,
interp/pallas/mosaic_gpu/launch.py Launch).

A plgpu.kernel in a shard_map body launches once per device; the launches meet after allocating
and before returning (the rendezvous of Pallas TPU kernels, spec/spmd.py remote-dma), so a peer's
buffer always exists when addressed. A device's GMEM buffers are symmetric: a kernel operand and
a semaphore reserved at launch are the same buffer on every device (XLA copies operands into
symmetric memory for these kernels: all_gather_mgpu.py "we fake modify the input to ensure that
XLA:GPU copies the operand into symmetric memory"). run_scoped / scratch_types semaphores are
block-local: one per block (CTA), shared by its warpgroups (lowering.py reserve_semaphores:
scope_idx = block_idx for _is_block_local_scope), zeroed at every launch
(pallas_call_registration.py zero_init_gmem_scratch), so a count left at the end is not an
error. The clusters of every device's launch are cores of one schedule (CLUSTERS): a kernel
whose blocks wait for all blocks of another device (collective_matmul_mgpu.py's
(device_offset + 1) * num_sms semaphore wait: all SMs resident at once) runs, its waiting
clusters parked while the others start. pl.get_global semaphores are reserved over every axis
of the kernel (lowering.py _get_global_lowering_rule: collective_axes = all axis names): one
per launch, zeroed at launch, symmetric across devices like the operands. Under an emulated
device (interp/emulated_device.py) a shipped kernel asking how many devices there are
(jax.device_count, jax.local_device_count; collective_matmul_mgpu requires it to equal the mesh
axis) is answered the size of the mesh it is traced under: the emulated machine has one GPU per
device of the program's mesh, in one process.

Ordering between devices is release/acquire through semaphores, at device granularity: a
semaphore signal (local, remote or multicast) releases the signalling device's accesses so far;
a completed semaphore_wait acquires every signal the semaphore received so far (increments are
atomic read-modify-writes, so the acquire synchronizes with each: PTX ISA chapter 8, release
sequences)."""

MULTI_DEVICE_UNDEFINED = {
    "mosaic_gpu/remote-race": "two accesses to the same element of a device buffer from different "
                              "devices, one a write, neither known to precede the other (detect_races): "
                              "RaceError; a kernel that ends while another device's access to its "
                              "buffers is not known to have completed (detect_races), or an access into "
                              "a device whose kernel has ended: RaceError",
    "mosaic_gpu/remote-deadlock": "every device waits on a semaphore no device will signal: "
                                  "DeadlockError naming each device, its kernel, the semaphore and the "
                                  "count it waits for",
    "mosaic_gpu/remote-device-id": "a device_id outside the mesh: OutOfBoundsError",
}

_FRAGMENTED = "jax/experimental/mosaic/gpu/fragmented_array.py FragmentedArray.reduce"

REDUCTIONS = (
    "plgpu.sum / max / min / prod (primitives mosaic_gpu_reduce_sum/max/min/prod, JAX >= 0.12; "
    "primitives.py _reduce_abstract_eval) reduce ``axes`` out of a register array, keeping the "
    "other axes in order, with the value of lax.reduce_sum / reduce_max / reduce_min / "
    "reduce_prod (spec/lax_reductions.py): a float sum or product correctly rounded once to "
    "the array's dtype, max/min exact with NaN propagating (the lowering uses max.NaN / "
    "min.NaN, or arith.maximumf / minimumf, which propagate NaN), integer sums and products "
    "wrapping. The register layout (how the array is spread over the warpgroup's threads) and "
    "accumulator_ilp do not change the value in the reference. Compliance: on the hardware a "
    "float sum is formed in the order of the lowering (each thread folds its registers into "
    "accumulator_ilp independent accumulators (default 8 for float add), then the vector "
    "lanes, then a butterfly of warp shuffles (shfl.bfly) across lanes, then across warps "
    "through SMEM scratch), each step rounded: backends are held to DOT_PRODUCT over the "
    "reduced length; a product is a chain of roundings (within n ulp for n factors near 1); "
    "a splat (constant) array's sum is x * n and its product powf(x, n) (an approximate "
    "power: not held exact).")

# What a Mosaic GPU kernel makes of primitives of other families and of the remote_ref transform:
# the entries of mpmd_map and run_scoped (spec/pallas.py), run_state (spec/state.py) and of the
# operations taking a GMEM ref list these.
IN_KERNELS = {
    "mosaic_gpu/kernel-mesh": "plgpu.kernel (mpmd_map over a Mosaic GPU mesh): the body runs once per "
                              "thread of the mesh: per grid point (a cluster), per block of the "
                              "cluster and per warpgroup (num_threads / thread_name). axis_index / "
                              "program_id give the coordinates over (*grid_names, *cluster_names, "
                              "thread_name). Operands are GMEM refs. Clusters synchronise with "
                              "nothing but global memory (semaphores). Clusters and the warpgroups "
                              "of a cluster run concurrently, synchronised only by barriers, "
                              "semaphores and waits: the reference runs them one at a time and "
                              "switches at every wait that cannot proceed, so a kernel whose result "
                              "depends on the schedule shows it under grid_order='shuffled' "
                              f"({_CORE} Mesh, kernel; {_LOWER} lower_pipelined_jaxpr_to_module)",
    "mosaic_gpu/clusters": CLUSTERS,
    "mosaic_gpu/warp-map": "plgpu.warp_map (mpmd_map over a WarpMesh): a fork/join of the warpgroup's "
                           "4 warps, each running the body with its warp id (axis_index of the "
                           "mesh's axis), concurrently with each other and the other warpgroups. A "
                           "warp starts knowing what its warpgroup observed and having waited what "
                           "it waited (its threads are the warpgroup's); at the join the warpgroup "
                           f"learns what every warp observed ({_LOWER} _mpmd_map_lowering_rule: 'a "
                           "fork/join over individual warps in a warpgroup'; "
                           "jax/_src/pallas/mosaic_gpu/helpers.py warp_map)",
    "mosaic_gpu/run-scoped": "run_scoped in a Mosaic GPU kernel: allocations per warpgroup, or per "
                             "block shared by its warpgroups when collective_axes names the thread "
                             "axis; cluster copies, cluster barriers and collective MMAs reach the "
                             "same allocation of another block of the cluster. Accumulators "
                             "(plgpu.ACC) start at zero; barriers at phase 0 with no arrivals; SMEM "
                             "is never-written memory. Tiled / swizzled SMEM is held at its physical "
                             "(tiled) shape; UntilingTransform, UnswizzleRef and "
                             "ExpandLeadingBatchDimensionsTransform are views with the logical "
                             "values (a swizzle permutes bytes within a tile row on the hardware "
                             f"and every access undoes it) ({_LOWER} _run_scoped_lowering_rule "
                             f"(mgpu.WGMMAAccumulator.zero); {_CORE} UntilingTransform, "
                             "UnswizzleRef, ExpandLeadingBatchDimensionsTransform)",
    "mosaic_gpu/run-state-accumulator": "plgpu.ACC.init(value) in pl.run_state: the body runs on an "
                                        "accumulator holding the value (refs the body closes over "
                                        "are the kernel's own memory), then every wgmma of the "
                                        "warpgroup is awaited, as Mosaic GPU's lowering ends the "
                                        "body with wgmma.wait_group 0 "
                                        f"({_LOWER} _run_state_lowering_rule: 'Await the "
                                        "accumulators')",
    "mosaic_gpu/remote-ref": "remote_ref (a PeerMemRef transform): a view of the same buffer "
                             "(operand or semaphore) of the device device_id names (mesh "
                             "coordinates; a dict keeps the unnamed axes' coordinates), read and "
                             "written by whatever operation takes it (TMA copies, loads, stores, "
                             f"semaphore_signal) ({_CORE} remote_ref, PeerMemRef; {_PRIMS} "
                             "_extract_gmem_copy_params)",
    "mosaic_gpu/multicast-ref-refused": "plgpu.multicast_ref (MulticastRef) views are refused",
}
# What an operation on a GMEM ref that may be a remote_ref view states.
REMOTE_REF = {**shared(IN_KERNELS, "mosaic_gpu/remote-ref", "mosaic_gpu/multicast-ref-refused"),
              **shared(MULTI_DEVICE_UNDEFINED, "mosaic_gpu/remote-device-id", "mosaic_gpu/remote-race")}

SEMANTICS = table(
    Semantics(
        "copy_gmem_to_smem",
        "TMA copy src (GMEM, through its transforms) -> dst (SMEM): the issuing warpgroup "
        "arrives once on the barrier with expect-tx of the copy's bytes; the copy's complete-tx "
        "follows. A false predicate skips both. dst is in flight until the barrier phase is "
        "observed (mosaic_gpu/tma-read-before-barrier).",
        edge_cases={"copy_gmem_to_smem/c1": "collective_axes, multicast (leader_tracked None): every "
                                            "block of the collective group issues the copy and receives "
                                            "all of src; each block arrives on its own barrier with "
                                            "expect-tx of all the bytes, and the slice each block loads "
                                            "completes its bytes on every block's barrier (a block that "
                                            "does not issue leaves the others' barriers waiting: a "
                                            "deadlock, reported)",
                    "copy_gmem_to_smem/c2": "collective_axes with leader_tracked=PARTITIONED(axis): "
                                            "block i receives the i-th equal slice of src along dst's "
                                            "axis; only the leader (block 0 of the group) arrives, "
                                            "expecting every slice's bytes, and every slice completes "
                                            "on the leader's barrier; REPLICATED is refused (its byte "
                                            "accounting is not stated)",
                    "copy_gmem_to_smem/c3": "without a barrier: cp.async (Mosaic GPU before Hopper; "
                                            "launch_context.py async_copy: the copies then "
                                            "cp.async.commit_group), one group per copy, dst in flight "
                                            "until wait_gmem_to_smem retires the group "
                                            "(mosaic_gpu/smem-access-under-cp-async); collective "
                                            "cp.async copies are refused (JAX: TMA only)",
                    "copy_gmem_to_smem/c4": "a source outside its array raises OutOfBoundsError "
                                            "(OOBFillMode is not modelled)",
                    "copy_gmem_to_smem/c5": "the copy reads its GMEM source until the barrier "
                                            "phase it completes on: a write of that GMEM (a plain "
                                            "store, a TMA store) by a thread that has not observed "
                                            "the phase races with the read (TmaRaceError, a "
                                            "RaceError; JAX's GPU interpret mode flags it too)",
                    **shared(UNDEFINED, "mosaic_gpu/tma-read-before-barrier",
                             "mosaic_gpu/recorded-race"),
                    **REMOTE_REF},
        sources=(_PRIMS + " copy_gmem_to_smem, _copy_gmem_to_smem_lowering",
                 "jax/experimental/mosaic/gpu/launch_context.py async_copy (collective, "
                 "leader_tracked)", _PTX_TMA, _PTX_MBAR),
    ),
    Semantics(
        "copy_smem_to_gmem",
        "TMA store src (SMEM) -> dst (GMEM), or with reduction_op dst = op(dst, src) "
        "elementwise in dst's dtype (cp.reduce.async.bulk.tensor): add (float: rounded once; "
        "integer: wrapping), min/max, and for integers and/or/xor, umin/umax and smin/smax (the "
        "bits read unsigned / signed), inc (old >= src ? 0 : old + 1) and dec (old == 0 or "
        "old > src ? src : old - 1) with unsigned compares (PTX atom .inc/.dec; Mosaic GPU "
        "treats signed i32 as unsigned for them: launch_context.py "
        "_is_tma_reduction_op_supported). commit_group=True closes a bulk async-group with every uncommitted "
        "store; the SMEM source stays in flight until wait_smem_to_gmem retires the group.",
        edge_cases={"copy_smem_to_gmem/c1": "the store writes its GMEM destination until a "
                                            "wait_smem_to_gmem with wait_read_only=False of the "
                                            "issuing thread retires its group "
                                            "(cp.async.bulk.wait_group; wait_group.read waits for "
                                            "the source reads only): an access to that GMEM by any "
                                            "thread meanwhile, a second store to it included, is "
                                            "a race (TmaRaceError, a RaceError); two reduction "
                                            "stores (cp.reduce.async.bulk, atomic per element) do "
                                            "not race with each other",
                    "copy_smem_to_gmem/c2": "bulk async-groups are per thread: a thread's "
                                            "wait_smem_to_gmem retires only its own stores, so "
                                            "another thread's write of SMEM a store still reads "
                                            "is a race (TmaRaceError) whatever that thread waited",
                    **shared(UNDEFINED, "mosaic_gpu/smem-write-under-tma-store",
                             "mosaic_gpu/async-store-at-exit", "mosaic_gpu/recorded-race",
                             "mosaic_gpu/gmem-race-between-clusters"),
                    **REMOTE_REF},
        sources=(_PRIMS + " copy_smem_to_gmem", _PTX_TMA,
                 "PTX ISA 9.7.9.25.x cp.async.bulk.wait_group / wait_group.read",
                 "jax/_src/pallas/mosaic_gpu/interpret/gpu_callbacks.py (JAX's detector: "
                 "per-thread store groups, read and write sides)"),
    ),
    Semantics("wait_gmem_to_smem", "cp.async.wait_group n then a warpgroup barrier "
              "(launch_context.py await_cp_async_copy): at most the n newest cp.async copies of "
              "this warpgroup stay in flight; the others' data may be read.",
              edge_cases={**shared(UNDEFINED, "mosaic_gpu/smem-access-under-cp-async")},
              sources=(_PRIMS + " wait_gmem_to_smem", "PTX ISA 9.7.9.x cp.async, "
                       "cp.async.commit_group, cp.async.wait_group")),
    Semantics("async_store_smem", "st.async of a register array into ref in the block at "
              "cluster_idx along cluster axis cluster_dim: one arrival on that block's barrier "
              "with expect-tx of the bytes (the Lane lowering: every thread of the warpgroup "
              "with its share, a barrier counting 128 arrivals per Pallas arrival; one lane for "
              "a tensor-core-ordered barrier), completed by the stores; atomic (add/max/min/and/"
              "or/xor, integers) makes it dst = op(dst, src). The destination is in flight "
              "until that barrier phase is observed (mosaic_gpu/tma-read-before-barrier).",
              edge_cases={"async_store_smem/c1": "atomic stores of floats are refused",
                          "async_store_smem/c2": "a cluster_idx outside the cluster raises "
                                                 "OutOfBoundsError"},
              sources=(_PRIMS + " async_store_smem, _async_store_smem_lowering",
                       _LOWER + " _get_barrier (arrival_multiplier)",
                       "PTX ISA st.async / red.async (mbarrier::complete_tx::bytes)")),
    Semantics("commit_group", "Closes a bulk async-group of this warpgroup's uncommitted TMA "
              "stores.", sources=(_PRIMS, _PTX_TMA)),
    Semantics("wait_smem_to_gmem", "At most n committed store groups of this warpgroup still "
              "read SMEM (n: parameter, or operand on JAX 0.10.2), and, unless wait_read_only, "
              "still write GMEM (copy_smem_to_gmem/c1); other threads' stores stay in flight.",
              edge_cases=shared(UNDEFINED, "mosaic_gpu/smem-write-under-tma-store",
                                "mosaic_gpu/async-store-at-exit"),
              sources=(_PRIMS, _PTX_TMA)),
    Semantics("commit_smem", "fence.proxy.async.shared::cta: orders the plain SMEM writes the "
              "warpgroup knows (its own, and others' ordered before it by barriers) before the "
              "TMA operations ordered after the fence (issued later by the warpgroup, or by a "
              "thread that observed a later release of it). No value effect in the reference.",
              edge_cases={"commit_smem/c1": "the TMA unit reads and writes SMEM through the async "
                                            "proxy: a TMA copy into SMEM or a TMA store from it "
                                            "that a plain store wrote, with the write ordered "
                                            "before the TMA operation but no commit_smem ordered "
                                            "between them, is a race (TmaRaceError, a RaceError, "
                                            "naming the TMA operation and the write); the same "
                                            "for the tensor core's SMEM operands (wgmma, tcgen05_mma, "
                                            "async_copy_smem_to_tmem); JAX's GPU interpret mode "
                                            "flags the same for TMA (its wgmma reads SMEM "
                                            "synchronously, unchecked: gpu_callbacks.py wgmma "
                                            "'TODO(jburnim): Async wgmma')",
                          **shared(UNDEFINED, "mosaic_gpu/recorded-race")},
              sources=(_PRIMS, _PTX_MODEL, "PTX ISA 9.7.13.x membar/fence: fence.proxy.async "
                       "(a cross-proxy fence is required between generic-proxy and async-proxy "
                       "accesses of the same memory)",
                       "jax/_src/pallas/mosaic_gpu/interpret/gpu_callbacks.py commit_smem",
                       "jax/_src/pallas/mosaic_gpu/primitives.py commit_smem: 'Commits all reads "
                       "from/writes to SMEM, making them visible to TMA and MMA operations'",
                       "triton lib/Dialect/TritonNvidiaGPU/Transforms/ProxFenceInsertion.cpp: a "
                       "fence.proxy.async between a shared-memory store and a wgmma/MMA reading it")),
    Semantics("barrier_arrive", "One arrival on the barrier (a false predicate: none). A phase "
              "completes when its num_arrivals arrived and no transaction bytes are pending; "
              "the arrival carries what the arriving warpgroup observed. A plgpu.ClusterBarrier "
              "is one barrier per block expecting num_arrivals from every block of its "
              "collective group; an arrival lands on the barrier of every block of the group "
              "(of the group's leader only, leader_tracked).",
              edge_cases={"barrier_arrive/c1": "the collective group of a plgpu.ClusterBarrier "
                                               "over several collective axes is the blocks that "
                                               "differ from the arriving one along one of them "
                                               "only (a tuple of axes counts as one): Mosaic GPU "
                                               "ORs one multicast mask per axis and expects "
                                               "sum(sizes) - len(axes) + 1 arrivals "
                                               "(mosaic/gpu/utils.py CollectiveBarrierRef); "
                                               "blocks differing along two axes are not ordered "
                                               "by it"},
              sources=(_PRIMS, _PTX_MBAR, _PTX_MODEL,
                       "jax/experimental/mosaic/gpu/utils.py CollectiveBarrierRef.initialize, "
                       "arrive (cluster_collective_mask per dimension)")),
    Semantics("barrier_wait", "The warpgroup's k-th wait on a barrier waits for phase k to "
              "complete (Mosaic GPU tracks the phase parity per thread); the warpgroup then "
              "observes what that phase's arrivals observed.",
              edge_cases={"barrier_wait/c1": "a warp_map's warps start at their warpgroup's "
                                             "phase of each barrier and, at the join, the phases "
                                             "they observed become the warpgroup's (its wait is "
                                             "its warps' waits, each on its own parity); where "
                                             "the warps observed different phases, the "
                                             "warpgroup's next wait or test of that barrier is "
                                             "undefined: BarrierError (JAX's GPU interpret mode "
                                             "raises too: 'its constituent warps have previously "
                                             "observed different phases')",
                          **shared(UNDEFINED, "mosaic_gpu/barrier-deadlock",
                                   "mosaic_gpu/barrier-skipped-phase")},
              sources=(_PRIMS, _PTX_MBAR, _LOWER + " _mpmd_map_lowering_rule (warp_map: a "
                       "fork/join over the warps of a warpgroup)",
                       "jax/_src/pallas/mosaic_gpu/interpret/shared_memory.py (barrier phases "
                       "per warp and warpgroup)")),
    Semantics("barrier_arrive_and_wait", "barrier_arrive then barrier_wait (JAX >= 0.12).",
              sources=(_PRIMS,)),
    Semantics("barrier_test", "Whether the thread's next phase of the barrier completed at the "
              "moment of the test; True counts as that phase's wait. Schedule-dependent "
              "answers and never-ending poll loops: BARRIER_TEST.",
              edge_cases={"barrier_test/c1": BARRIER_TEST,
                          **shared(UNDEFINED, "mosaic_gpu/barrier-poll-deadlock",
                                   "mosaic_gpu/barrier-skipped-phase")},
              sources=(_PRIMS + " barrier_test, _barrier_test_lowering",
                       _UTILS + " BarrierRef.test, test_parity",
                       _PTX_MBAR + "; 9.7.13.15.16 mbarrier.test_wait / try_wait",
                       "PTX ISA chapter 8 memory consistency model (no progress order between "
                       "threads)")),
    Semantics(
        "wgmma_ref",
        "acc += a @ b (a from SMEM or registers, b from SMEM, through their transforms), "
        "asynchronous until wgmma_wait. f16/bf16 and fp8 (e4m3fn, e5m2, mixed) operands: every "
        "product is exact in float64; the exact sum of the products and the accumulator is "
        "rounded once to the accumulator's dtype (the PTX ISA leaves the accumulation order "
        "and intermediate precision to the implementation; the backend is held to "
        "DOT_PRODUCT). int8 operands with the int32 accumulator: the exact sum wrapped to 32 "
        "bits (wgmma ... .s32.s8.s8 without .satfinite).",
        edge_cases={**shared(UNDEFINED, "mosaic_gpu/accumulator-before-wgmma-wait",
                             "mosaic_gpu/smem-write-under-wgmma"),
                    "wgmma_ref/c1": "uint8 operands are refused: Mosaic GPU emits s8 for every 8-bit "
                                    "integer (jax/experimental/mosaic/gpu/wgmma.py ptx_operand_type: "
                                    "'we always assume that 8-bit integers are s8')"},
        sources=(_PRIMS + " wgmma", _PTX_WGMMA), exactness=CORRECTLY_ROUNDED,
    ),
    Semantics("wgmma", "The value form of wgmma_ref (after run_state discharge): acc + a @ b, "
              "numerics as wgmma_ref.", sources=(_PRIMS,), exactness=CORRECTLY_ROUNDED),
    Semantics("wgmma_wait", "At most n wgmma of this warpgroup stay in flight (n: parameter, or "
              "operand on JAX 0.10.2). Each wgmma is its own group (primitives.py wgmma_wait: "
              "'no more than n WGMMA operations in flight').", sources=(_PRIMS, _PTX_WGMMA)),
    Semantics("wgmma_accumulator_deref", "Waits as wgmma_wait(wait_n) (None: no wait), then "
              "reads the accumulator; wgmma_accumulator_deref_p on JAX <= 0.11.",
              edge_cases=shared(UNDEFINED, "mosaic_gpu/accumulator-before-wgmma-wait"),
              sources=(_PRIMS,)),
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
        edge_cases={**shared(UNDEFINED, "mosaic_gpu/tmem-read-before-commit",
                             "mosaic_gpu/tmem-write-under-load"),
                    "tcgen05_mma/c1": "collective_axis (2-CTA MMA): issued by the pair's leader block "
                                      "only (the others' calls do nothing); block i's acc += block i's "
                                      "a @ [b of block 0 | b of block 1]; a barrier operand is "
                                      "committed to both blocks' barriers",
                    "tcgen05_mma/c2": "a_scale/b_scale (block-scaled) and a_sparse_metadata (sparse) "
                                      "are refused: their TMEM layouts are not modelled; tf32 and "
                                      "integer kinds are refused",
                    "tcgen05_mma/c3": "pipelined pairs (PTX ISA 9.7.16.6 tcgen05 memory consistency: "
                                      "mma -> mma, cp -> mma): an mma is ordered after an earlier "
                                      "mma or cp of the same thread, or of another thread that "
                                      "arrived on a barrier with orders_tensor_core=True after "
                                      "issuing it (tcgen05.fence::before_thread_sync) when this "
                                      "thread waited on such a barrier since (fence::after_thread_"
                                      "sync); a commit of this thread then tracks both. Any other "
                                      "pair of tensor-core operations touching the same memory, one "
                                      "writing, before a commit tracking the earlier one is "
                                      "observed (mma then cp into its accumulator, two cps into one "
                                      "TMEM, two threads' mmas not so ordered) is undefined: "
                                      "AsyncAccessError naming both"},
        sources=(_PRIMS + " tcgen05_mma", _LOWER, _PTX_TCGEN05,
                 _PRIMS + " barrier_arrive / barrier_wait (orders_tensor_core: "
                 "tcgen05.fence::before_thread_sync / after_thread_sync)"),
        exactness=CORRECTLY_ROUNDED,
    ),
    Semantics("tcgen05_commit_arrive", "tcgen05.commit: one arrival on the barrier, after every "
              "tcgen05 operation the thread issued so far (a false predicate: none; JAX >= 0.12 "
              "has the predicate). Collective: the pair's leader commits to the barrier of both "
              "blocks (tcgen05.commit multicast, mask 0b11); the other block's call does nothing.",
              edge_cases=shared(UNDEFINED, "mosaic_gpu/tmem-read-before-commit"),
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_copy_smem_to_tmem", "tcgen05.cp: the SMEM values (through their transforms) "
              "into TMEM; asynchronous like tcgen05_mma, and ordered before the thread's later "
              "tcgen05_mma reading it.",
              edge_cases={**shared(UNDEFINED, "mosaic_gpu/tmem-read-before-commit"),
                          "async_copy_smem_to_tmem/c1": "collective copies (collective_axis: "
                                                        "tcgen05.cp.cta_group::2 issued by the leader "
                                                        "block, primitives.py "
                                                        "_async_copy_smem_to_tmem_lowering_rule) are "
                                                        "refused: which block's SMEM reaches which "
                                                        "block's TMEM is not stated by the sources "
                                                        "followed here; JAX's GPU interpret mode "
                                                        "ignores collective_axis "
                                                        "(interpret/gpu_callbacks.py)"},
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_copy_scales_to_tmem", "tcgen05.cp of the block scales of a block-scaled MMA "
              "from SMEM to TMEM (plgpu.async_copy_scales_to_tmem), asynchronous like "
              "async_copy_smem_to_tmem: awaited through tcgen05_commit_arrive, or consumed by a "
              "tcgen05_mma of the same thread.",
              edge_cases={"async_copy_scales_to_tmem/c1": "refused (UnsupportedPrimitiveError): "
                                                          "scales in TMEM feed only block-scaled "
                                                          "tcgen05_mma (a_scale / b_scale), whose "
                                                          "scale-factor layout the reference does "
                                                          "not model (tcgen05_mma/c2)"},
              sources=(_PRIMS + " async_copy_scales_to_tmem", _PTX_TCGEN05)),
    Semantics("async_copy_sparse_metadata_to_tmem", "tcgen05.cp of the 2:4 sparsity metadata of a "
              "sparse MMA from SMEM to TMEM (plgpu.async_copy_sparse_metadata_to_tmem), "
              "asynchronous like async_copy_smem_to_tmem.",
              edge_cases={"async_copy_sparse_metadata_to_tmem/c1": "refused "
                                                                   "(UnsupportedPrimitiveError): the "
                                                                   "metadata feeds only sparse "
                                                                   "tcgen05_mma (a_sparse_metadata), "
                                                                   "whose metadata layout the "
                                                                   "reference does not model "
                                                                   "(tcgen05_mma/c2)"},
              sources=(_PRIMS + " async_copy_sparse_metadata_to_tmem", _PTX_TCGEN05)),
    Semantics("mgpu_atomic_store", "plgpu.atomic_add / atomic_max / atomic_min / atomic_and / "
              "atomic_or / atomic_xor (primitives.py _atomic_store): ref[idx] = op(ref[idx], val), "
              "atomic per element only (red.global; a remote_ref view reaches another device's "
              "buffer).",
              edge_cases={"mgpu_atomic_store/c1": "refused (UnsupportedPrimitiveError): not modelled; "
                                                  "concurrent float atomics make the value depend on "
                                                  "the schedule ('floating-point addition is not "
                                                  "associative, so this op can introduce "
                                                  "non-determinism': atomic_add's docstring)"},
              sources=(_PRIMS + " atomic_store_p, _atomic_store, atomic_add",)),
    Semantics("async_load", "async_load_tmem (primitive async_load): the TMEM values through the "
              "ref's transforms, usable at once; the TMEM stays read until wait_load_tmem. "
              "reduce (JAX >= 0.11) also returns max / min / absmax / absmin along the last "
              "dimension; for f32 Mosaic GPU lowers it to tcgen05.ld.red...NaN.f32, so a row "
              "holding a NaN reduces to the canonical NaN (0x7fffffff).",
              edge_cases=shared(UNDEFINED, "mosaic_gpu/tmem-write-under-load",
                                "mosaic_gpu/tmem-store-before-commit"),
              sources=(_PRIMS + " async_load_tmem", _PTX_TCGEN05,
                       "jax/experimental/mosaic/gpu/tcgen05.py _tmem_load (red_mod '.NaN')")),
    Semantics("wait_load_tmem", "tcgen05.wait::ld: the thread's TMEM loads are retired; its next "
              "barrier arrival carries that to other threads.", sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("async_store_tmem", "tcgen05.st: writes the value into TMEM; visible to the "
              "thread's loads and MMAs after commit_tmem.",
              edge_cases={"async_store_tmem/c1": "two stores of one thread to the same TMEM with "
                                                 "no commit_tmem between (st -> st is not a "
                                                 "pipelined pair), or an access by another thread "
                                                 "not ordered after the storer's commit_tmem by a "
                                                 "barrier (an arrival carries no pending store): "
                                                 "AsyncAccessError",
                          **shared(UNDEFINED, "mosaic_gpu/tmem-store-before-commit",
                                   "mosaic_gpu/tmem-write-under-load")},
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics("commit_tmem", "tcgen05.wait::st: the thread's TMEM stores become visible.",
              sources=(_PRIMS, _PTX_TCGEN05)),
    Semantics(
        "try_cluster_cancel",
        "Cluster launch control: asks to cancel the launch of a cluster that has not started and "
        "take its work. The reference starts clusters in launch order when no started "
        "warpgroup can go on (CLUSTERS): a request cancels the next cluster of that order not "
        "started yet while one is left, and a cancelled cluster never runs (under "
        "grid_order='shuffled' a "
        "seeded random half of the requests fail instead, so kernels run under both outcomes); "
        "threads along collective_axes share one request. The first such thread arrives with "
        "expect-tx of the 16-byte response and the response completes it; the others arrive. "
        "The response is in flight until the barrier phase is observed.",
        edge_cases={**shared(UNDEFINED, "mosaic_gpu/tma-read-before-barrier")},
        sources=(_PRIMS + " try_cluster_cancel, try_cluster_cancel_lowering", _PTX_CLC)),
    Semantics("query_cluster_cancel", "Decodes the response: the grid indices (grid_names) of "
              "the cancelled cluster and whether the request succeeded; the indices of a "
              "failed request are undefined (PTX: get_first_ctaid is defined for a cancelled "
              "response only): -1, loud as an index.",
              sources=(_PRIMS + " query_cluster_cancel", _PTX_CLC)),
    Semantics("inline_mgpu", "The two proxy fences JAX's dynamic_scheduling_loop emits through "
              "helpers.inline_ptx (fence.proxy.async acquire/release): ordering only, no value "
              "effect in the reference, whose accesses are in program order.",
              edge_cases={"inline_mgpu/c1": "any other Mosaic GPU IR has no semantics the reference "
                                            "can evaluate and is refused"},
              sources=("jax/_src/pallas/mosaic_gpu/helpers.py "
                                                "dynamic_scheduling_loop, inline_ptx", _PTX_MODEL)),
    Semantics("semaphore_signal_parallel", "Each listed semaphore gets its increment, in no "
              "guaranteed order (the reference: the listed one); a device_id names the semaphore of "
              "another device of the enclosing shard_map (MULTI_DEVICE; refused outside one).",
              edge_cases={"mosaic_gpu/semaphore-names": SEMAPHORE_NAMES},
              sources=(_PRIMS + " semaphore_signal_parallel",)),
    *(Semantics(f"mosaic_gpu_reduce_{kind}", REDUCTIONS,
                sources=(_PRIMS + " reduce_sum_p / reduce_max_p / reduce_min_p / reduce_prod_p",
                         _LOWER + " _reduce_lowering_rule", _FRAGMENTED),
                exactness=CORRECTLY_ROUNDED if kind in ("sum", "prod") else EXACT)
      for kind in ("sum", "max", "min", "prod")),
    Semantics(
        "mma",
        "Ampere mma.sync (plgpu.mma: 'acc + a @ b synchronously using Ampere MMA "
        "instructions'): a register operation of the warpgroup, nothing in flight. 16-bit "
        "float and fp8 operands: every product exact in float64, the sum and the accumulator "
        "added in float64 and rounded once to the accumulator's dtype (as wgmma; the PTX ISA "
        "leaves the order and intermediate precision of mma's accumulation to the "
        "implementation: backends are held to DOT_PRODUCT). Integer (and bool) operands with "
        "the int32 accumulator: the exact sum wrapped to 32 bits (.s32 accumulation without "
        ".satfinite).",
        edge_cases={"mma/c1": "float64 operands are refused: Mosaic GPU lowers them to the m16n8k8 f64 "
                              "mma, whose rounding of the k-steps the PTX ISA does not state"},
        sources=(_PRIMS + " mma, _mma_abstract_eval", "jax/experimental/mosaic/gpu/mma.py "
                 "(mma.sync.aligned.m16n8k{k}.row.col.{s32|f32|f64})",
                 "PTX ISA 9.7.14 mma (warp-level matrix multiply-accumulate)"),
        exactness=CORRECTLY_ROUNDED),
    Semantics("load", "plgpu.load: the ref's elements through its transforms (the layout and "
              "optimized arguments do not change values).",
              edge_cases={**REMOTE_REF, **shared(UNDEFINED, "mosaic_gpu/recorded-race")},
              sources=(_PRIMS,)),
    Semantics("store", "plgpu.store: writes the value through the ref's transforms.",
              edge_cases={**REMOTE_REF, **shared(UNDEFINED, "mosaic_gpu/recorded-race")},
              sources=(_PRIMS,)),
    # -- several devices (MULTI_DEVICE below) --
    Semantics("semaphore_signal_multicast", "Adds value to the semaphore's counterpart on every "
              "device along collective_axes, this one included (a multimem.red add to the "
              "multicast address).",
              edge_cases=shared(MULTI_DEVICE_UNDEFINED, "mosaic_gpu/remote-deadlock"),
              sources=(_PRIMS + " semaphore_signal_multicast, _semaphore_signal_multicast_"
                       "lowering (SemaphoreRef.signal_multimem)", _PTX_MULTIMEM)),
    Semantics("multimem_store", "Writes the value to the same elements of the ref's "
              "counterpart on every device along collective_axes, this one included.",
              edge_cases={**shared(MULTI_DEVICE_UNDEFINED, "mosaic_gpu/remote-race")},
              sources=(_PRIMS + " multimem_store", _PTX_MULTIMEM)),
    Semantics("multimem_load_reduce", "The reduction (add, min, max, and, or, xor) of the same "
              "elements of the ref's counterparts on every device along collective_axes, this "
              "one included.",
              edge_cases={"multimem_load_reduce/c1": "integers: exact; add wraps modulo 2^bits (PTX "
                                                     "integer add)",
                          "multimem_load_reduce/c2": "float add: the exact sum rounded once to the "
                                                     "operand type (as psum); a backend is held to "
                                                     "DOT_PRODUCT(K = devices) with bound sum|x_k| "
                                                     "(MULTI_DEVICE: the PTX ISA states no order or "
                                                     "intermediate precision beyond .acc_prec)",
                          "multimem_load_reduce/c3": "float min/max: NaN operands, +0.0 against -0.0, "
                                                     "and float32 (PTX has no f32 multimem min/max) are "
                                                     "refused",
                          **shared(MULTI_DEVICE_UNDEFINED, "mosaic_gpu/remote-race")},
              sources=(_PRIMS + " multimem_load_reduce (docstring: dtypes and operations)",
                       _PTX_MULTIMEM), exactness=CORRECTLY_ROUNDED),
)

# Other JAX spellings of the primitives above: {name: the primitive of its entry}; JAX 0.12
# dropped the "_p" of these names.
ALIASES = {f"{name}_p": name for name in ("inline_mgpu", "set_max_registers",
                                          "wgmma_accumulator_deref", "wgmma_accumulator_store")}

