"""GPU kernels over a mesh of grid, cluster and threads (Mosaic GPU ``plgpu.kernel``): blocks,
warpgroups, mbarriers and the asynchronous operations they order.

The kernel body runs once per *thread* of the mesh (a Mosaic GPU "thread" is a warpgroup of 128
CUDA threads). Clusters (points of the grid) run one after another, in row-major order or a
seeded shuffled one (``grid_order="shuffled"``): they cannot synchronise with each other except
through global memory. The warpgroups of all blocks of one cluster run concurrently as far as the
model is concerned: under ``interp.pallas.cores.CoreScheduler``, one at a time, a warpgroup that
waits on a barrier whose phase has not completed handing over to the next one (a warpgroup gets a
thread of its own only while it waits). A correct kernel therefore gets its one answer whatever the order; a wait nobody can satisfy
is a deadlock, reported (``DeadlockError``) instead of hanging.

Asynchronous operations complete at issue (their data is where it will be) but are *in flight*
until the program observes their completion; what the program may not do meanwhile is
undefined behaviour, raised as ``AsyncAccessError`` naming kernel, block, warpgroup and buffer:

* a TMA copy to SMEM (``copy_gmem_to_smem``) is in flight until its barrier's phase completed and
  the accessing warpgroup observed that completion, directly (``barrier_wait``) or through a
  chain of barriers (arrivals carry what the arriving warpgroup has observed, as in the PTX
  memory model's release/acquire pattern of mbarriers);
* a TMA store (``copy_smem_to_gmem``) reads its SMEM source until ``wait_smem_to_gmem`` of the
  issuing warpgroup retires it;
* a ``wgmma`` reads its SMEM operands and writes its accumulator until ``wgmma_wait`` (or a
  waiting accumulator read) retires it.

Warpgroups sharing SMEM: a write by one warpgroup must be ordered before another warpgroup's
access by a barrier phase (the writer arrives after writing; the accessor observes the phase):
otherwise the value depends on the schedule (``WarpgroupRaceError``). Each arrival carries what
its warpgroup wrote and observed (a vector clock over warpgroups and barrier phases).

The dialect's rules (``interp/rules/pallas_mosaic_gpu.py``) call into this module; it imports no
rule module.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ..errors import RaceError, UndefinedBehaviorError
from .dma import Region
from .grid import (KernelRun, MeshPlan, _alloc_scratch, _check_outputs_written,
                   maybe_current_run, operand_buffers)
from .memory import KernelRef, logical_value


class AsyncAccessError(UndefinedBehaviorError):
    """An access to memory an asynchronous operation (TMA, wgmma) may still be reading or
    writing: before the barrier, wait or fence that orders it."""


class BarrierError(UndefinedBehaviorError):
    """Misuse of an mbarrier: a wait that skips a phase, more arrivals than a phase expects."""


class Barrier:
    """One mbarrier (PTX ISA 9.7.13.15): a phase completes when its expected arrival count
    arrived and its pending transaction bytes (TMA ``complete_tx``) reached zero; ``completed``
    counts completed phases."""
    __slots__ = ("name", "num_arrivals", "arrivals", "tx", "completed", "knowledge", "pending")

    def __init__(self, name, num_arrivals):
        self.name = name
        self.num_arrivals = int(num_arrivals)
        self.arrivals = 0
        self.tx = 0
        self.completed = 0
        self.knowledge = []   # per completed phase: what its completion makes visible
        self.pending = {}     # what the arrivals of the current phase carry

    def arrive(self, known: dict, count: int = 1) -> None:
        _join(self.pending, known)
        self.arrivals += count
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.arrivals >= self.num_arrivals and self.tx == 0:
            if self.arrivals > self.num_arrivals:
                raise BarrierError(f"barrier '{self.name}': {self.arrivals} arrivals in a phase "
                                   f"that expects {self.num_arrivals}")
            phase = self.completed
            self.pending[id(self)] = phase + 1
            self.knowledge.append(self.pending)
            self.pending = {}
            self.arrivals = 0
            self.completed = phase + 1

    def describe(self) -> str:
        return (f"barrier '{self.name}' (phase {self.completed}: {self.arrivals} of "
                f"{self.num_arrivals} arrivals, {self.tx} transaction bytes pending)")


def _join(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class Footprint:
    """The elements of one buffer an access or an asynchronous operation touches, as a mask
    over the buffer (cheap to intersect for the block-sized SMEM views Mosaic GPU kernels use;
    views of other buffers fall back to byte-address regions)."""
    __slots__ = ("ref", "index", "array", "mask", "_region")

    def __init__(self, ref, index):
        self.ref, self.index, self.array = ref, index, ref.array
        self.mask = None
        self._region = None

    def _mask(self):
        if self.mask is None:
            self.mask = _index_mask(self.index, self.array.shape)
        return self.mask

    def overlaps(self, other: "Footprint") -> bool:
        if self.array is other.array:
            return bool(np.logical_and(self._mask(), other._mask()).any())
        if not np.may_share_memory(self.array, other.array):
            return False
        return self.region().overlaps(other.region())

    def region(self) -> Region:
        if self._region is None:
            self._region = Region(self.ref, self.index)
        return self._region

    def describe(self) -> str:
        return self.region().describe()

    def covered_by(self, other: "Footprint") -> bool:
        """Whether every element here is also in ``other`` (same buffer only)."""
        return self.array is other.array and not (self._mask() & ~other._mask()).any()


# Masks of immutable indices (ints, slices, the read-only position arrays of tiled SMEM views,
# which interp/ref_indexing.py hands out again for the same view) by index identity and buffer
# shape: a kernel touches the same few views of each buffer at every step. The entry holds the
# index, so its id is not reused while the entry exists.
_MASKS: dict = {}
_MAX_MASKS = 256


def _index_mask(index, shape) -> np.ndarray:
    hit = _MASKS.get(id(index))
    if hit is not None and hit[0] is index and hit[1] == shape:
        return hit[2]
    mask = np.zeros(shape, bool)
    mask[index] = True
    if type(index) is tuple and all(type(ix) is slice or type(ix) is int or (
            type(ix) is np.ndarray and not ix.flags.writeable) for ix in index):
        mask.flags.writeable = False
        if len(_MASKS) >= _MAX_MASKS:
            _MASKS.clear()
        _MASKS[id(index)] = (index, shape, mask)
    return mask


class WarpgroupRun(KernelRun):
    """One warpgroup of one block: the state its primitives consult."""

    def __init__(self, name, grid, options, cluster, block, warpgroup):
        super().__init__(name, grid, options)
        self.cluster = cluster            # ClusterState
        self.block = block                # block coordinates in the cluster
        self.warpgroup = warpgroup
        self.known = {}                   # barrier id -> completed phases this warpgroup observed
        self.waits = {}                   # barrier id -> phases this warpgroup waited for
        self.stores = []                  # TMA store groups: [[Footprint of SMEM read, ...], ...]
        self.uncommitted_stores = []      # TMA stores not yet committed to a group
        self.wgmma = []                   # in-flight wgmma: (accumulator ref, operand Footprints)
        self.scoped_counts = {}
        self.epoch = 1                    # this warpgroup's releases so far (barrier arrivals) + 1

    def where(self) -> str:
        return (f"kernel '{self.name}' at cluster {self.cluster.point}, block {self.block}, "
                f"warpgroup {self.warpgroup}")

    def allocate_scoped(self, prototypes, collective_axes) -> list:
        """run_scoped's buffers: one per warpgroup, or one per block shared by the warpgroups
        with ``collective_axes`` naming the thread axis (Mosaic GPU's collective allocations)."""
        if not collective_axes:
            return [p.fresh(self) for p in prototypes]
        cluster = self.cluster
        axes = set(collective_axes)
        if not axes <= {cluster.thread_name}:
            raise UndefinedBehaviorError(f"{self.where()}: run_scoped collective over "
                                         f"{collective_axes} (only the thread axis "
                                         f"{cluster.thread_name!r} is supported)")
        n = self.scoped_counts.get(id(prototypes), 0)
        self.scoped_counts[id(prototypes)] = n + 1
        key = (self.block, id(prototypes), n)
        refs = cluster.shared.get(key)
        if refs is None:
            refs = cluster.shared[key] = [p.fresh(self) for p in prototypes]
        return refs

    # -- waits ----------------------------------------------------------------------------------
    def wait_until(self, ready, description: str) -> None:
        scheduler = self.cluster.scheduler
        if ready():
            return
        if scheduler is None:
            raise DeadlockError(f"{self.where()}: deadlock: {description}, and no other "
                                "warpgroup or copy can complete it")
        scheduler.wait_until(self.core, ready, description)

    def wait_barrier(self, barrier: Barrier) -> None:
        """barrier_wait: the warpgroup's next phase of ``barrier`` (its k-th wait waits for
        phase k: Mosaic GPU tracks the phase parity per thread, PTX mbarrier.try_wait.parity)."""
        phase = self.waits.get(id(barrier), 0)
        self.wait_until(lambda: barrier.completed > phase,
                        f"{self.where()} waits for phase {phase} of {barrier.describe()}")
        if barrier.completed > phase + 1:
            raise BarrierError(f"{self.where()}: waits for phase {phase} of barrier "
                               f"'{barrier.name}' when phase {barrier.completed - 1} already "
                               "completed (a parity wait cannot tell the two apart)")
        self.waits[id(barrier)] = phase + 1
        _join(self.known, barrier.knowledge[phase])

    def arrive(self, barrier: Barrier) -> None:
        # A release: what this warpgroup wrote before it is visible to whoever observes the
        # phase this arrival completes.
        self.known[id(self)] = self.epoch
        self.epoch += 1
        barrier.arrive(self.known)

    # -- async stores -----------------------------------------------------------------------------
    def wait_stores(self, n: int) -> None:
        """wait_smem_to_gmem(n): at most n committed store groups stay in flight."""
        if len(self.stores) > n:
            del self.stores[:len(self.stores) - n]

    def wait_wgmma(self, n: int) -> None:
        if len(self.wgmma) > n:
            del self.wgmma[:len(self.wgmma) - n]

    def finish(self) -> None:
        if self.stores or self.uncommitted_stores:
            regions = [r for g in self.stores for r in g] + self.uncommitted_stores
            raise AsyncAccessError(f"{self.where()}: the warpgroup ends with TMA stores still "
                                   f"reading SMEM ({regions[0].describe()}): no wait_smem_to_gmem "
                                   "retired them")


class WarpgroupRaceError(RaceError):
    """Warpgroups accessing the same SMEM with no barrier ordering a write before the other
    access: the result depends on the schedule."""


class DeadlockError(UndefinedBehaviorError):
    """Every unfinished warpgroup waits and nothing can complete any of the waits."""


class ClusterState:
    """What the warpgroups of one cluster share: collective allocations, the scheduler, the
    asynchronous copies in flight and the mesh geometry axis_index reads."""

    def __init__(self, plan, point):
        self.point = point
        self.axes, self.sizes = plan.axes, plan.sizes
        self.thread_name = plan.thread_name
        self.shared = {}
        self.scheduler = None
        self.tma = []       # in-flight TMA writes to SMEM: (Footprint, barrier, phase)
        self.writes = []    # warpgroups' SMEM writes: (Footprint, writer run, writer epoch)
        self.concurrent = plan.num_threads * len(plan.blocks) > 1

    def check_access(self, ref, index, kind: str) -> None:
        """The access hook of kernel refs (KernelRef._before_access)."""
        run = maybe_current_run()
        if not isinstance(run, WarpgroupRun):
            return
        shared = self.concurrent and "smem" in ref.kind
        if not self.tma and not run.wgmma and not _any_stores(run, self) and not shared:
            return
        region = Footprint(ref, index)
        for tma_region, barrier, phase in self.tma:
            if run.known.get(id(barrier), 0) <= phase and region.overlaps(tma_region):
                raise AsyncAccessError(
                    f"{run.where()}: {kind} of {region.describe()} while a TMA copy is still "
                    f"writing it: phase {phase} of barrier '{barrier.name}' that guards the copy "
                    "was not observed (barrier_wait) by this warpgroup")
        if shared:
            self._check_shared(run, region, kind)
        if kind != "read":
            reading = [(f, "a TMA store", "wait_smem_to_gmem")
                       for group in run.stores + [run.uncommitted_stores] for f in group]
            reading += [(f, "a wgmma", "wgmma_wait") for _, operands in run.wgmma for f in operands]
            for footprint, what, wait in reading:
                if region.overlaps(footprint):
                    raise AsyncAccessError(f"{run.where()}: {kind} of {region.describe()} while "
                                           f"{what} still reads it (before {wait})")
        for acc, _ in run.wgmma:
            if ref is acc or (ref.array.base is not None and ref.array.base is acc.array.base):
                raise AsyncAccessError(
                    f"{run.where()}: {kind} of accumulator {acc.short()} while a wgmma still "
                    "writes it (before wgmma_wait)")

    def _check_shared(self, run, region, kind) -> None:
        """SMEM written by another warpgroup must be ordered before this access by a barrier
        phase whose arrivals carry that write (a data race otherwise: the value depends on the
        schedule). Writes are remembered per writer, the newest over the older it covers."""
        for footprint, writer, epoch in self.writes:
            if writer is not run and run.known.get(id(writer), 0) < epoch and \
                    region.overlaps(footprint):
                raise WarpgroupRaceError(
                    f"{run.where()}: {kind} of {region.describe()}, which warpgroup "
                    f"{writer.warpgroup} of block {writer.block} wrote with no barrier ordering "
                    "the two: the result depends on the schedule")
        if kind != "read":
            self.writes = [w for w in self.writes
                           if not (w[1] is run and w[2] == run.epoch and w[0].covered_by(region))]
            self.writes.append((region, run, run.epoch))

    def add_tma(self, region, barrier) -> None:
        self.tma = [t for t in self.tma if not region.overlaps(t[0])]
        self.tma.append((region, barrier, barrier.completed))


def _any_stores(run, cluster) -> bool:
    return bool(run.stores or run.uncommitted_stores)


class GpuMeshPlan(MeshPlan):
    """``mpmd_map`` over a Mosaic GPU mesh (``plgpu.kernel``): grid x cluster x threads."""

    def __init__(self, eqn):
        self._read_kernel(eqn)
        mesh = self.mesh
        self.grid_names, self.grid = tuple(mesh.grid_names), tuple(int(g) for g in mesh.grid)
        self.cluster_names = tuple(mesh.cluster_names)
        self.cluster = tuple(int(c) for c in mesh.cluster)
        self.thread_name = mesh.thread_name
        self.num_threads = int(mesh.num_threads or 1)
        self.blocks = list(itertools.product(*[range(c) for c in self.cluster]))
        self.axes = tuple(mesh.shape)
        self.sizes = tuple(int(s) for s in mesh.shape.values())
        self.n_in = len(eqn.in_avals)
        n_operands = self.n_in + len(self.out_avals)
        self.scratch = [(v.aval, self.names[n_operands + i])
                        for i, v in enumerate(self.invars[n_operands:])]

    def run(self, args):
        opts = self.options
        arrays, inits = operand_buffers(args, self.out_physical, self.aliases, opts)
        clusters = list(itertools.product(*[range(g) for g in self.grid]))
        if opts.grid_order == "shuffled":
            order = np.random.default_rng(opts.seed).permutation(len(clusters))
            clusters = [clusters[i] for i in order]
        last = None
        for point in clusters:
            last = self._run_cluster(point, arrays, inits)
        if last is not None:
            _check_outputs_written(last, [KernelRef(a, self.names[self.n_in + o], last,
                                                    init=inits[self.n_in + o], kind="output")
                                          for o, a in enumerate(arrays[self.n_in:])],
                                   inits[self.n_in:])
        return [logical_value(impl, a)
                for (_, _, impl), a in zip(self.out_physical, arrays[self.n_in:])]

    def _run_cluster(self, point, arrays, inits):
        opts = self.options
        cluster = ClusterState(self, point)
        runs = {}
        for block in self.blocks:
            scratch = None
            for wg in range(self.num_threads):
                run = WarpgroupRun(self.name, self.sizes, opts, cluster, block, wg)
                run.mesh = cluster
                run.core = (block, wg)
                run.tracker = cluster
                coords = point + block + ((wg,) if self.thread_name is not None else ())
                run.point = dict(zip(self.axes, coords))
                run.program_ids = coords
                run.kernel_grid = self.sizes
                if scratch is None:   # scratch operands are SMEM: one per block
                    scratch = [_alloc_scratch(aval, name, run, opts)
                               for aval, name in self.scratch]
                refs = [KernelRef(a, self.names[k], run, init=inits[k],
                                  kind="input (gmem)" if k < self.n_in else "output (gmem)",
                                  check_bounds=opts.check_bounds)
                        for k, a in enumerate(arrays)]
                runs[run.core] = (run, refs + scratch)

        def body(core):
            run, refs = runs[core]
            with run:
                self.kernel_plan.run(self.kernel_consts, refs)
                if run.pending is not None:
                    run.raise_pending()
                run.finish()

        if len(runs) == 1:
            body(next(iter(runs)))
        else:
            from .cores import CoreScheduler
            order = list(runs)
            if opts.grid_order == "shuffled":
                order = [order[i] for i in np.random.default_rng(
                    (opts.seed or 0, *point)).permutation(len(order))]
            cluster.scheduler = CoreScheduler(order, self.name, deadlock=DeadlockError)
            cluster.scheduler.run({c: functools.partial(body, c) for c in order})
        return next(iter(runs.values()))[0]


def is_gpu_mesh(mesh) -> bool:
    """A Mosaic GPU mesh (grid, cluster, threads) rather than a TPU core mesh."""
    return all(hasattr(mesh, a) for a in ("grid_names", "cluster_names", "num_threads"))


def mesh_plan_class(meshes):
    """The plan of an ``mpmd_map``: a Mosaic GPU mesh (grid, cluster, warpgroups) or a TPU
    core mesh."""
    return GpuMeshPlan if meshes and is_gpu_mesh(meshes[0]) else MeshPlan
