"""GPU kernels over a mesh of grid, cluster and threads (Mosaic GPU ``plgpu.kernel``): blocks,
warpgroups, mbarriers and the asynchronous operations they order.

The kernel body runs once per *thread* of the mesh (a Mosaic GPU "thread" is a warpgroup of 128
CUDA threads). Clusters (points of the grid) and the warpgroups of all blocks of a cluster run
concurrently as far as the model is concerned: every warpgroup is a core of one
``interp.schedule`` schedule, run one at a time, a warpgroup that waits on a barrier or
semaphore that is not ready handing over to another one (a warpgroup gets a thread of its own
only while it waits). A cluster starts, all its warpgroups at once, only when no started
warpgroup can go on, in row-major order or a seeded shuffled one (``grid_order="shuffled"``):
most clusters run one after another, and only the clusters that wait on later ones (a
persistent kernel whose blocks wait for all the others) stay alive beside them. Clusters
synchronise with each other through global memory only (semaphores). A correct kernel therefore
gets its one answer whatever the order; a wait nobody can satisfy is a deadlock, reported
(``DeadlockError``) instead of hanging.

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

import collections
import functools
import itertools

import numpy as np

from ...errors import RaceError, UndefinedBehaviorError
from ...schedule import handoffs, poll, run_cores, waiting_descriptions, wait_until
from ..dma import Region
from ..grid import KernelRun, maybe_current_run
from ..memory import KernelRef, allocate_scratch
from ..mesh import MeshKernel


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

    def complete_tx(self, nbytes: int, known: dict | None = None) -> None:
        if known:   # a copy issued by a thread that does not arrive here (cluster copies)
            _join(self.pending, known)
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
    if not into:   # (a phase's first arrival: its clock is the arrival's)
        into.update(other)
        return
    get = into.get
    for k, v in other.items():
        if get(k, 0) < v:
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
            return _mask_relation(self._mask(), other._mask(), _OVERLAPS, _masks_overlap)
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
        return self.array is other.array and _mask_relation(self._mask(), other._mask(), _COVERS,
                                                            _mask_covered)


# Masks of immutable indices (ints, slices, the read-only position arrays of tiled SMEM views,
# which interp/ref_indexing.py hands out again for the same view) by index identity and buffer
# shape: a kernel touches the same few views of each buffer at every step. The entry holds the
# index, so its id is not reused while the entry exists.
_MASKS: dict = {}
_MAX_MASKS = 256


def _masks_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.logical_and(a, b).any())


def _mask_covered(a: np.ndarray, b: np.ndarray) -> bool:
    return not (a & ~b).any()


# Relations (overlap, cover) of two remembered masks by their identities: the same few views meet
# at every step, and a remembered mask is read-only, so the answer cannot change. The entry holds
# both masks, so their ids are not reused while it exists. Masks of other indices (writable) are
# compared afresh.
_OVERLAPS: dict = {}
_COVERS: dict = {}
_MAX_RELATIONS = 4096


def _mask_relation(a: np.ndarray, b: np.ndarray, memo: dict, relation) -> bool:
    key = (id(a), id(b))
    hit = memo.get(key)
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    answer = relation(a, b)
    if not a.flags.writeable and not b.flags.writeable:
        if len(memo) >= _MAX_RELATIONS:
            memo.clear()
        memo[key] = (a, b, answer)
    return answer


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
            _OVERLAPS.clear()   # (so the relations hold no more masks than _MASKS does)
            _COVERS.clear()
        _MASKS[id(index)] = (index, shape, mask)
    return mask


class WarpgroupRun(KernelRun):
    """One warpgroup of one block: the state its primitives consult."""
    __slots__ = ("cluster", "block", "warpgroup", "warp", "known", "waits", "stores",
                 "uncommitted_stores", "wgmma", "scoped_counts", "epoch", "tensor_core_ops",
                 "in_tensor_pipe", "tmem_stores", "tmem_loads", "warps", "cancel_calls", "tests",
                 "fruitless", "cp_async")

    def __init__(self, name, grid, options, cluster, block, warpgroup):
        super().__init__(name, grid, options)
        self.cluster = cluster            # ClusterState
        self.block = block                # block coordinates in the cluster
        self.warpgroup = warpgroup
        self.warp = None                  # the warp of a warp_map (WarpRun), None for the whole
        #                                   warpgroup
        self.known = {}                   # barrier id -> completed phases this warpgroup observed
        self.waits = {}                   # barrier id -> phases this warpgroup waited for
        self.stores = []                  # TMA store groups: [[Footprint of SMEM read, ...], ...]
        self.uncommitted_stores = []      # TMA stores not yet committed to a group
        self.wgmma = []                   # in-flight wgmma: (accumulator ref, operand Footprints)
        self.scoped_counts = {}
        self.epoch = 1                    # this warpgroup's releases so far (barrier arrivals) + 1
        self.tensor_core_ops = []         # tcgen05 operations this thread issued (TensorCoreOp)
        self.in_tensor_pipe = False       # reading an operand for a tcgen05 op it issues
        self.tmem_stores = []             # async_store_tmem footprints before commit_tmem
        self.tmem_loads = []              # async_load_tmem records before wait_load_tmem
        self.warps = {}                   # warp id -> WarpRun of this warpgroup's warp_maps
        self.cancel_calls = 0             # try_cluster_cancel calls so far
        self.tests = 0                    # barrier_test calls so far
        self.fruitless = {}               # barrier id -> what a test answering False last saw
        self.cp_async = []                # cp.async groups in flight: [Footprint of SMEM written]

    def where(self) -> str:
        return (f"kernel '{self.label}' at cluster {self.cluster.point}, block {self.block}, "
                f"warpgroup {self.warpgroup}")

    def leave_scope(self, refs) -> None:
        """Nothing to unregister: other devices find a launch's buffers by what they are
        (:meth:`peer_buffer`), its threads entering scopes unordered."""

    def check_scope_exit(self, refs) -> None:
        """Nothing to check: Mosaic GPU's semaphores belong to the launch (Launch.semaphores),
        zeroed at every launch (mosaic_gpu/pallas_call_registration.py zero_init_gmem_scratch):
        a count left at the end of a run_scoped is not observable, and JAX's collective kernels
        leave one (wait with decrement=False)."""

    def allocate_scoped(self, prototypes, collective_axes) -> list:
        """run_scoped's buffers: one per warpgroup, or one per block shared by the warpgroups
        with ``collective_axes`` naming the thread axis (Mosaic GPU's collective allocations)."""
        cluster = self.cluster
        sem_at = [i for i, p in enumerate(prototypes) if p.kind == "semaphore"]
        if sem_at:
            # Mosaic GPU semaphores (plgpu.SemaphoreType) live in GMEM, reserved at launch: a
            # run_scoped's are block-local, one per block, shared by its warpgroups (lowering.py
            # reserve_semaphores / _is_block_local_scope: scope_idx = block_idx), also when
            # the run_scoped allocates other buffers (plgpu.kernel's scratch_types).
            count = ("semaphores", id(prototypes))
            n = self.scoped_counts.get(count, 0)
            self.scoped_counts[count] = n + 1
            key = (id(prototypes), n, cluster.point, self.block)
            sems = cluster.launch.semaphores(key, [prototypes[i] for i in sem_at])
            if len(sem_at) == len(prototypes):
                return sems
            refs = list(self._allocate_on_chip(prototypes, collective_axes))
            for i, sem in zip(sem_at, sems):
                refs[i] = sem
            return refs
        return self._allocate_on_chip(prototypes, collective_axes)

    def _allocate_on_chip(self, prototypes, collective_axes) -> list:
        cluster = self.cluster
        if not collective_axes:   # per warpgroup: its counterpart in another block is the same
            n = self.scoped_counts.get(id(prototypes), 0)   # warpgroup's allocation there
            self.scoped_counts[id(prototypes)] = n + 1
            thread = (self.warpgroup, self.warp)
            return cluster.block_allocation(("scoped", thread, id(prototypes), n),
                                            self.block, prototypes, self)
        axes = set(collective_axes)
        if not axes <= {cluster.thread_name}:
            raise UndefinedBehaviorError(f"{self.where()}: run_scoped collective over "
                                         f"{collective_axes} (only the thread axis "
                                         f"{cluster.thread_name!r} is supported)")
        n = self.scoped_counts.get(id(prototypes), 0)
        self.scoped_counts[id(prototypes)] = n + 1
        return cluster.block_allocation(("scoped", id(prototypes), n), self.block, prototypes,
                                        self)

    def peer_buffer(self, ref, other_launch):
        """The buffer of another device's launch that ``ref`` is on this one (GMEM operands
        and semaphores are symmetric: the same buffer on every device), or None."""
        return self.cluster.launch.peer_buffer(ref, other_launch)

    def release(self) -> dict:
        """What this thread makes visible to whoever observes a barrier phase it contributes to
        (an arrival, or the complete-tx of a copy it issued): its writes so far."""
        self.known[id(self)] = self.epoch
        self.epoch += 1
        return self.known

    # -- waits ----------------------------------------------------------------------------------
    def wait_until(self, ready, description: str) -> None:
        wait_until(ready, description, lambda d: DeadlockError(
            f"{self.where()}: deadlock: {d}, and no other warpgroup or copy can complete it"))

    def wait_barrier(self, barrier: Barrier) -> None:
        """barrier_wait: the warpgroup's next phase of ``barrier`` (its k-th wait waits for
        phase k: Mosaic GPU tracks the phase parity per thread, PTX mbarrier.try_wait.parity)."""
        phase = self.waits.get(id(barrier), 0)
        self.wait_until(lambda: barrier.completed > phase,
                        f"{self.where()} waits for phase {phase} of {barrier.describe()}")
        self._observe(barrier, phase)

    def _observe(self, barrier: Barrier, phase: int) -> None:
        """The warpgroup observed the completion of its next phase ``phase`` of ``barrier``."""
        if barrier.completed > phase + 1:
            raise BarrierError(f"{self.where()}: waits for phase {phase} of barrier "
                               f"'{barrier.name}' when phase {barrier.completed - 1} already "
                               "completed (a parity wait cannot tell the two apart)")
        self.waits[id(barrier)] = phase + 1
        _join(self.known, barrier.knowledge[phase])

    def test_barrier(self, barrier: Barrier) -> bool:
        """barrier_test (spec/pallas_mosaic_gpu.py BARRIER_TEST): whether the warpgroup's next
        phase of ``barrier`` completed, observed as barrier_wait observes it when it did. A phase
        not complete yet: the other cores that can go on run first (the test is made as late as
        the schedule allows), except under grid_order="shuffled", which answers False at once
        for a seeded half of such tests. A second test answering False after nothing changed
        (no other core ran, the barrier and this warpgroup's releases as they were) is a poll
        loop that never ends: DeadlockError."""
        phase = self.waits.get(id(barrier), 0)
        self.tests += 1

        def done():
            return barrier.completed > phase

        if not done():
            opts = self.options
            if opts.grid_order == "shuffled" and np.random.default_rng(
                    (opts.seed or 0, *self.cluster.point, *self.block, self.warpgroup,
                     0 if self.warp is None else self.warp + 1, self.tests)).random() < 0.5:
                return False   # the test came before anything else ran: one legal answer
            what = f"{self.where()} polls (barrier_test) phase {phase} of {barrier.describe()}"
            if not poll(done, what):
                seen = (handoffs(), barrier.completed, barrier.arrivals, barrier.tx, self.epoch)
                if self.fruitless.get(id(barrier)) == seen:
                    others = "; ".join(waiting_descriptions()) or "none"
                    raise DeadlockError(
                        f"{self.where()}: deadlock: polls (barrier_test) phase {phase} of "
                        f"{barrier.describe()} again with nothing changed since its last test "
                        "answered False: no other warpgroup or copy can go on and this one "
                        "released nothing (no arrival, no copy completing on a barrier), so the "
                        "poll loop never "
                        f"ends (the other waits: {others})")
                self.fruitless[id(barrier)] = seen
                return False
        self.fruitless.pop(id(barrier), None)
        self._observe(barrier, phase)
        return True

    def arrive(self, barrier: Barrier) -> None:
        # A release: what this warpgroup wrote before it is visible to whoever observes the
        # phase this arrival completes.
        barrier.arrive(self.release())

    # -- async stores -----------------------------------------------------------------------------
    def wait_stores(self, n: int) -> None:
        """wait_smem_to_gmem(n): at most n committed store groups stay in flight."""
        if len(self.stores) > n:
            del self.stores[:len(self.stores) - n]

    def wait_cp_async(self, n: int) -> None:
        """wait_gmem_to_smem(n): at most n cp.async groups (one per copy) stay in flight."""
        if len(self.cp_async) > n:
            del self.cp_async[:len(self.cp_async) - n]

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
    """What the warpgroups of one cluster share: collective allocations, the
    asynchronous copies in flight and the mesh geometry axis_index reads."""

    def __init__(self, plan, point):
        self.point = point
        self.axes, self.sizes = plan.axes, plan.sizes
        self.thread_name = plan.thread_name
        self.shared = {}
        self.tma = []       # in-flight TMA writes to SMEM: (Footprint, barrier, phase)
        self.writes = []    # warpgroups' SMEM writes: (Footprint, writer run, writer epoch)
        self.concurrent = plan.num_threads * len(plan.blocks) > 1
        self.tensor_core = []   # tcgen05 operations in flight (TensorCoreOp)
        self.tmem_loads = []    # async_load_tmem records: [Footprint, reader run, retire epoch]
        self.launch = None          # the Launch this cluster belongs to
        self.runs = {}              # (block, warpgroup) -> (run, refs), until it starts
        self.unfinished = 0         # warpgroups not finished
        self.plan = plan
        self.allocations = {}   # allocation key -> {block: [refs]} (scratch, collective scoped)
        self.allocation_of = {}   # id(ref) -> (allocation key, position)
        self.prototypes = {}      # allocation key -> what its refs are made from

    @property
    def globals(self) -> dict:
        """get_global buffers (interp/rules/pallas.py get_global): Mosaic GPU reserves them over
        every axis of the kernel (lowering.py _get_global_lowering_rule: collective_axes = all
        axis names), one per launch shared by its clusters."""
        return self.launch.globals

    # -- clusters: the same allocation in another block of the cluster ---------------------------
    def block_allocation(self, key, block, prototypes, run) -> list:
        """The refs of allocation ``key`` in ``block`` (made from ``prototypes`` the first time,
        by whichever block of the cluster asks first)."""
        per_block = self.allocations.setdefault(key, {})
        self.prototypes[key] = prototypes
        refs = per_block.get(block)
        if refs is None:
            refs = per_block[block] = [p.fresh(run) for p in prototypes]
            for i, r in enumerate(refs):
                self.allocation_of[id(r)] = (key, i)
        return refs

    def register_block_allocation(self, key, block, refs) -> None:
        self.allocations.setdefault(key, {})[block] = refs
        for i, r in enumerate(refs):
            self.allocation_of[id(r)] = (key, i)

    def peer(self, ref, block):
        """``ref`` (a kernel scratch buffer or a block-wide run_scoped allocation) as allocated
        in ``block`` of this cluster, or None for memory with no counterpart there."""
        found = self.allocation_of.get(id(ref))
        if found is None:
            return None
        key, i = found
        refs = self.allocations[key].get(block)
        if refs is None:   # the block has not reached the run_scoped yet: allocate it now
            refs = self.block_allocation(key, block, self.prototypes[key], maybe_current_run())
        return refs[i]

    def group(self, block, axes) -> list:
        """The blocks of this cluster that differ from ``block`` only along the cluster axes
        ``axes`` (composite axes flattened), in row-major order: a collective's participants."""
        names = list(self.plan.cluster_names)
        flat = set()
        for a in axes:
            flat |= set(a) if isinstance(a, tuple) else {a}
        free = [names.index(a) for a in flat if a in names]
        return [b for b in self.plan.blocks
                if all(b[d] == block[d] for d in range(len(block)) if d not in free)]

    def check_access(self, ref, index, kind: str) -> None:
        """The access hook of kernel refs (KernelRef._before_access)."""
        run = maybe_current_run()
        if not isinstance(run, WarpgroupRun):
            return
        shared = self.concurrent and "smem" in ref.kind
        if not self.tma and not run.wgmma and not _any_stores(run, self) and not shared and \
                not self.tensor_core and not run.tmem_stores and not run.cp_async:
            return
        region = Footprint(ref, index)
        for copy_region in run.cp_async:
            if region.overlaps(copy_region):
                raise AsyncAccessError(
                    f"{run.where()}: {kind} of {region.describe()} while a cp.async copy is "
                    "still writing it (before wait_gmem_to_smem retired it)")
        if self.tensor_core or run.tmem_stores:
            self._check_tensor_core(run, region, kind)
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

    # -- Blackwell: the tensor core (tcgen05) and TMEM ----------------------------------------------
    def _check_tensor_core(self, run, region, kind) -> None:
        """An access while a tcgen05 operation (mma, cp) may still write it, or still reads it and
        the access writes: undefined until the accessor observed a barrier phase a
        tcgen05_commit_arrive (or the mma's own barrier) completes after the operation. TMEM a
        thread stored to (async_store_tmem) is not visible to its own reads before commit_tmem."""
        for op in self.tensor_core:
            if (run.in_tensor_pipe and op.issuer is run) or op.observed_by(run):
                continue
            if any(region.overlaps(w) for w in op.writes):
                raise AsyncAccessError(
                    f"{run.where()}: {kind} of {region.describe()} while a {op.what} still writes "
                    f"it: {op.guard_text()}")
            if kind != "read" and any(region.overlaps(r) for r in op.reads):
                raise AsyncAccessError(
                    f"{run.where()}: {kind} of {region.describe()} while a {op.what} still reads "
                    f"it: {op.guard_text()}")
        if kind == "read":
            for f in run.tmem_stores:
                if region.overlaps(f):
                    raise AsyncAccessError(
                        f"{run.where()}: read of {region.describe()}, which async_store_tmem "
                        "wrote with no commit_tmem since: the store is not visible yet")

    def add_tensor_core_op(self, op: "TensorCoreOp") -> None:
        self.check_tmem_write(op.issuer, op.writes)
        self.tensor_core.append(op)
        op.issuer.tensor_core_ops.append(op)

    def check_tmem_write(self, writer, footprints) -> None:
        """A write of TMEM an async_load_tmem may still read: undefined unless the loading thread
        retired the load (wait_load_tmem) and, for another writer, the writer observed a barrier
        arrival the loader made after that wait."""
        for f in footprints:
            for loaded, reader, retired in self.tmem_loads:
                if not loaded.overlaps(f):
                    continue
                if retired is None or (reader is not writer and
                                       writer.known.get(id(reader), 0) < retired):
                    raise AsyncAccessError(
                        f"{writer.where()}: write of {f.describe()} while an async_load_tmem of "
                        f"{reader.where()} may still read it (no wait_load_tmem"
                        f"{'' if retired is None else ' ordered before this write by a barrier'})")

    def add_tma(self, region, barrier) -> None:
        self.tma = [t for t in self.tma if not region.overlaps(t[0])]
        self.tma.append((region, barrier, barrier.completed))


class TensorCoreOp:
    """A tcgen05 operation (tcgen05_mma, async_copy_smem_to_tmem) in flight: what it writes and
    reads, and the barrier phases whose completion shows it done (``guards``: every
    tcgen05_commit_arrive, or mma barrier, its thread issued after it; PTX ISA tcgen05.commit
    tracks all prior asynchronous tcgen05 operations of the thread)."""
    __slots__ = ("what", "issuer", "writes", "reads", "guards")

    def __init__(self, what, issuer, writes, reads):
        self.what, self.issuer, self.writes, self.reads = what, issuer, writes, reads
        self.guards = []

    def observed_by(self, run) -> bool:
        return any(run.known.get(id(b), 0) > phase for b, phase in self.guards)

    def guard_text(self) -> str:
        if not self.guards:
            return "no tcgen05_commit_arrive tracks it yet"
        return " or ".join(f"phase {p} of barrier '{b.name}'" for b, p in self.guards) + \
            " (the commit that tracks it) was not observed (barrier_wait) by this thread"


def commit_tensor_core(run, barriers) -> None:
    """tcgen05.commit to ``barriers`` (one; both of a block pair for a collective commit): every
    tcgen05 operation ``run`` issued so far completes before the arrival; the reference's
    operations are done at issue, so it arrives now."""
    live = set(map(id, run.cluster.tensor_core))
    run.tensor_core_ops = [op for op in run.tensor_core_ops if id(op) in live]
    for barrier in barriers:
        for op in run.tensor_core_ops:
            op.guards.append((barrier, barrier.completed))
        run.arrive(barrier)


class WarpRun(WarpgroupRun):
    """One warp of a warpgroup inside ``plgpu.warp_map`` (an ``mpmd_map`` over a WarpMesh):
    warps run concurrently with each other and with the other warpgroups. A warp starts each
    warp_map knowing what its warpgroup knows and having waited what it waited (the warpgroup's
    threads are the warps'); the warpgroup learns what every warp observed when they join."""

    __slots__ = ("parent",)

    def __init__(self, parent, warp):
        super().__init__(parent.name, parent.grid, parent.options, parent.cluster, parent.block,
                         parent.warpgroup)
        self.parent, self.warp = parent, warp
        self.core = (parent.core, "warp", warp)
        self.tracker, self.program_ids = parent.tracker, parent.program_ids
        self.kernel_grid = parent.kernel_grid
        self.devices, self.device_rank = parent.devices, parent.device_rank   # (Launch.enter)

    def where(self) -> str:
        return f"{super().where()}, warp {self.warp}"


class _WarpMeshState:
    def __init__(self, axes, sizes):
        self.axes, self.sizes = axes, sizes


class WarpMapPlan:
    """``mpmd_map`` over a ``WarpMesh`` inside a Mosaic GPU kernel (``plgpu.warp_map``): a
    fork/join of the warpgroup's 4 warps (lowering.py _mpmd_map_lowering_rule: "a fork/join over
    individual warps in a warpgroup"), each running the body with its warp id."""
    NUM_WARPS = 4

    def __init__(self, eqn):
        from ...evaluator import get_plan, split_jaxpr
        p = eqn.params
        if len(p["meshes"]) != 1:
            raise eqn.unsupported("warp_map with several meshes")
        self.axis_name = p["meshes"][0].axis_name
        jaxpr, self.consts = split_jaxpr(p["jaxprs"][0])
        self.plan = get_plan(jaxpr, eqn.options)

    def run(self, args):
        parent = maybe_current_run()
        if not isinstance(parent, WarpgroupRun) or isinstance(parent, WarpRun):
            raise UndefinedBehaviorError("warp_map outside a Mosaic GPU warpgroup (or nested in "
                                         "another warp_map: Mosaic GPU refuses to lower it)")
        cluster = parent.cluster
        mesh = _WarpMeshState(tuple(cluster.axes) + (self.axis_name,),
                              tuple(cluster.sizes) + (self.NUM_WARPS,))
        warps = {}
        for w in range(self.NUM_WARPS):
            warp = parent.warps.get(w)
            if warp is None:
                warp = parent.warps[w] = WarpRun(parent, w)
            _join(warp.known, parent.known)
            _join(warp.waits, parent.waits)
            warp.mesh = mesh
            warp.point = {**parent.point, self.axis_name: w}
            warps[warp.core] = warp

        def body(warp):
            with warp:
                self._run_body(args)
                if warp.pending is not None:
                    warp.raise_pending()

        bodies = {core: functools.partial(body, warp) for core, warp in warps.items()}
        cluster.concurrent = True   # the warps' SMEM accesses are checked as concurrent ones
        run_cores(bodies, parent.label, deadlock=DeadlockError)
        for warp in warps.values():   # the join: a warpgroup barrier after the warps
            _join(parent.known, warp.known)
            parent.stores += warp.stores + ([warp.uncommitted_stores] if warp.uncommitted_stores
                                            else [])
            warp.stores, warp.uncommitted_stores = [], []
        return []

    def _run_body(self, args) -> None:
        self.plan.run(self.consts, list(args))


class CoreMapWarpPlan(WarpMapPlan):
    """JAX 0.10.2's ``plgpu.warp_map``: ``core_map`` over a ``WarpMesh`` (pallas/core.py
    core_map_p; from 0.11 it binds ``mpmd_map``). The body closes over the warpgroup's refs and
    scalars: the equation's operands are its jaxpr's constvars, and it has no invars (0.10.2's
    lowering.py _core_map_lowering_rule lowers it with ``args=(), consts=args``)."""

    def __init__(self, eqn):
        from ...evaluator import get_plan
        jaxpr = eqn.params["jaxpr"]
        if jaxpr.invars:
            raise eqn.unsupported("core_map over a WarpMesh with scratch_shapes (0.10.2's Mosaic "
                                  "GPU lowering passes the body no arguments)")
        self.axis_name = eqn.params["mesh"].axis_name
        self.plan = get_plan(jaxpr, eqn.options)

    def _run_body(self, args) -> None:
        self.plan.run(list(args), [])


def _any_stores(run, cluster) -> bool:
    return bool(run.stores or run.uncommitted_stores)


class GpuMeshPlan(MeshKernel):
    """``mpmd_map`` over a Mosaic GPU mesh (``plgpu.kernel``): grid x cluster x threads."""

    def __init__(self, eqn):
        super().__init__(eqn)
        mesh = self.mesh
        self.grid_names, self.grid = tuple(mesh.grid_names), tuple(int(g) for g in mesh.grid)
        self.cluster_names = tuple(mesh.cluster_names)
        self.cluster = tuple(int(c) for c in mesh.cluster)
        self.thread_name = mesh.thread_name
        self.num_threads = int(mesh.num_threads or 1)
        self.blocks = list(itertools.product(*[range(c) for c in self.cluster]))
        self.axes = tuple(mesh.shape)
        self.sizes = tuple(int(s) for s in mesh.shape.values())
        n_operands = self.num_inputs + self.num_outputs
        self.scratch = [(v.aval, self.names[n_operands + i])
                        for i, v in enumerate(self.invars[n_operands:])]

    def run(self, args):
        opts = self.options
        arrays, inits = self.operand_buffers(args)
        clusters = list(itertools.product(*[range(g) for g in self.grid]))
        if opts.grid_order == "shuffled":
            order = np.random.default_rng(opts.seed).permutation(len(clusters))
            clusters = [clusters[i] for i in order]
        launch = Launch(self, arrays, inits)   # this launch's GMEM (across devices: its runs)
        launch.queue = collections.deque(clusters)
        threads = [(block, wg) for block in self.blocks for wg in range(self.num_threads)]
        # Every warpgroup of every cluster is a core of one schedule, cluster-major; the cores
        # start lazily (only when no started core can go on), so a cluster starts when the
        # started ones all wait or finished, and only the clusters that wait on another one keep
        # their state (and a parked thread) alive beside it.
        bodies = {}
        for point in clusters:
            order = threads
            if opts.grid_order == "shuffled" and len(threads) > 1:
                order = [threads[i] for i in np.random.default_rng(
                    (opts.seed or 0, *point)).permutation(len(threads))]
            for thread in order:
                bodies[WarpgroupCore(point, *thread)] = functools.partial(
                    self._run_thread, launch, point, thread)
        if len(bodies) == 1:
            next(iter(bodies.values()))()
        else:
            run_cores(bodies, self.name, deadlock=DeadlockError, lazy=True,
                      unit=lambda core: core.cluster)
        launch.leave()
        n_in = self.num_inputs
        self.check_outputs_written(launch.run, [KernelRef(a, self.names[n_in + o], launch.run,
                                                          init=inits[n_in + o], kind="output")
                                                for o, a in enumerate(arrays[n_in:])],
                                   inits[n_in:])
        return self.outputs(arrays)

    def _run_thread(self, launch, point, thread) -> None:
        """One warpgroup (``thread``: (block, warpgroup)) of cluster ``point``; the cluster starts
        with its first warpgroup to start, unless try_cluster_cancel cancelled it (then none of
        its warpgroups runs), and its state goes when its last warpgroup finished."""
        cluster = launch.clusters.get(point, False)
        if cluster is False:
            cluster = launch.clusters[point] = self._start_cluster(launch, point)
        if cluster is None:   # cancelled before it started
            return
        run, refs = cluster.runs.pop(thread)
        with run:
            self.kernel_plan.run(self.kernel_consts, refs)
            if run.pending is not None:
                run.raise_pending()
            run.finish()
        cluster.unfinished -= 1
        if not cluster.unfinished:
            del launch.clusters[point]

    def _start_cluster(self, launch, point):
        """The ClusterState of cluster ``point`` as it starts (its warpgroup runs, its blocks'
        scratch SMEM), or None when try_cluster_cancel cancelled it (no longer in the launch
        queue)."""
        queue = launch.queue
        if queue and queue[0] == point:
            queue.popleft()
        elif point in queue:
            queue.remove(point)
        else:
            return None
        opts = self.options
        cluster = ClusterState(self, point)
        cluster.launch = launch
        for block in self.blocks:
            scratch = None
            for wg in range(self.num_threads):
                run = WarpgroupRun(self.name, self.sizes, opts, cluster, block, wg)
                run.mesh = cluster
                run.core = (block, wg)
                run.tracker = cluster
                launch.enter(run)   # across devices: the device's view of the others
                coords = point + block + ((wg,) if self.thread_name is not None else ())
                run.point = dict(zip(self.axes, coords))
                run.program_ids = coords
                run.kernel_grid = self.sizes
                if scratch is None:   # scratch operands are SMEM: one per block
                    scratch = [self.allocate_scratch(aval, name, run)
                               for aval, name in self.scratch]
                    cluster.register_block_allocation(("scratch",), block, scratch)
                refs = [KernelRef(a, self.names[k], run, init=launch.inits[k],
                                  kind="input (gmem)" if k < self.num_inputs else
                                  "output (gmem)",
                                  check_bounds=opts.check_bounds)
                        for k, a in enumerate(launch.arrays)]
                cluster.runs[run.core] = (run, refs + scratch)
        cluster.unfinished = len(cluster.runs)
        return cluster


class WarpgroupCore(collections.namedtuple("WarpgroupCore", "cluster block warpgroup")):
    """A warpgroup's key in the core schedule (deadlock messages name it); the warpgroups of a
    cluster start together (a cluster launches whole)."""
    __slots__ = ()

    def __repr__(self):
        return f"cluster {self.cluster}, block {self.block}, warpgroup {self.warpgroup}"


class LaunchRun(KernelRun):
    """A launch as the kernel's runs on other devices see it (interp/pallas/devices.py members):
    its GMEM is found through ``launch``."""
    __slots__ = ("launch",)

    def __init__(self, name, grid, options, launch):
        super().__init__(name, grid, options)
        self.launch = launch


class Launch:
    """One launch of a Mosaic GPU kernel: its GMEM (operands, semaphores reserved at launch)
    and, inside a shard_map body, its runs on the other devices (interp/pallas/devices.py:
    the launches meet at start and end; remote refs, multimem and remote signals address the
    same buffer of another device's launch)."""

    def __init__(self, plan, arrays, inits):
        from ..devices import DeviceTracker, join
        opts = plan.options
        self.arrays, self.inits = arrays, inits
        self.queue = collections.deque()   # clusters not started, in launch order (the front is
        # the next to start; try_cluster_cancel cancels it)
        self.clusters = {}   # point -> its ClusterState while it runs, None once cancelled
        self.globals = {}    # get_global semaphores by equation: one per launch
        self.allocations = {}   # key -> semaphores (block-local scope, reserved at launch)
        self.prototypes = {}    # key -> what they are made from (zero: zeroed at launch)
        self.run = LaunchRun(plan.name, plan.sizes, opts, self)
        self.refs = [KernelRef(a, plan.names[k], self.run, init=inits[k],
                               kind="input (gmem)" if k < plan.num_inputs else "output (gmem)",
                               check_bounds=opts.check_bounds)
                     for k, a in enumerate(arrays)]
        self.devices = join(self.run, self.refs)
        self.tracker = None
        if self.devices is not None and opts.detect_races:
            self.tracker = lambda inner: DeviceTracker(inner, self.devices,
                                                       lambda ref: "gmem" in ref.kind,
                                                       maybe_current_run)
            self.run.tracker = self.tracker(None)

    def semaphores(self, key, prototypes) -> list:
        if key not in self.allocations:
            self.prototypes[key] = prototypes
            self.allocations[key] = [p.fresh(self.run) for p in prototypes]
        return self.allocations[key]

    def enter(self, run) -> None:
        """A warpgroup run of this launch: in a shard_map, it knows the other devices."""
        if self.devices is None:
            return
        run.devices, run.device_rank = self.devices, self.run.device_rank
        if self.tracker is not None:
            run.tracker = self.tracker(run.tracker)

    def peer_buffer(self, ref, other):
        """``ref``'s buffer in the launch ``other`` (a KernelRun of another device), or None."""
        theirs = other.launch
        for k, array in enumerate(self.arrays):
            if ref.array is array:
                return theirs.refs[k]
        for key, refs in self.allocations.items():
            for i, r in enumerate(refs):
                if r is ref:
                    return theirs.semaphores(key, self.prototypes[key])[i]
        for eqn, r in self.globals.items():
            if r is ref:   # the peer's, reserved at its launch: made when first addressed
                if eqn not in theirs.globals:
                    theirs.globals[eqn] = allocate_scratch(eqn.params["what"], "global",
                                                           theirs.run, theirs.run.options)
                return theirs.globals[eqn]
        return None

    def leave(self) -> None:
        if self.devices is not None:
            self.devices.leave(self.run)


def is_gpu_mesh(mesh) -> bool:
    """A Mosaic GPU mesh (grid, cluster, threads) rather than a TPU core mesh."""
    return all(hasattr(mesh, a) for a in ("grid_names", "cluster_names", "num_threads"))


def is_warp_mesh(mesh) -> bool:
    try:
        from jax._src.pallas.mosaic_gpu.core import WarpMesh
    except ImportError:   # no Mosaic GPU here (JAX 0.10.2 without absl-py)
        return False
    return isinstance(mesh, WarpMesh)
