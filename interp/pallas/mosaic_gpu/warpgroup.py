"""One warpgroup of a Mosaic GPU kernel (a Mosaic GPU "thread": 128 CUDA threads) as it runs:
what it has observed (vector clocks), the barrier phases it waited for, the asynchronous
operations it issued that are still in flight, its scoped allocations.

Its waits block it in the schedule (``interp.schedule``): the other warpgroups, clusters and
devices run meanwhile; a wait nobody can satisfy is a deadlock (``DeadlockError``).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ...errors import UndefinedBehaviorError
from ...schedule import handoffs, poll, waiting_descriptions, wait_until
from ..grid import KernelRun
from .errors import BarrierError, DeadlockError
from .races import join, semaphore_clock


class WarpgroupRun(KernelRun):
    """One warpgroup of one block: the state its primitives consult."""
    __slots__ = ("cluster", "block", "warpgroup", "warp", "known", "waits", "stores",
                 "uncommitted_stores", "wgmma", "scoped_counts", "epoch", "tensor_core_ops",
                 "in_tensor_pipe", "tmem_stores", "tmem_loads", "warps", "cancel_calls", "tests",
                 "fruitless", "cp_async", "store_writes", "async_proxy", "diverged",
                 "tensor_known")

    def __init__(self, name, grid, options, cluster, block, warpgroup):
        super().__init__(name, grid, options)
        self.cluster = cluster            # ClusterState
        self.block = block                # block coordinates in the cluster
        self.warpgroup = warpgroup
        self.warp = None                  # the warp of a warp_map (WarpRun), None for the whole
        #                                   warpgroup
        self.known = {}                   # barrier id -> completed phases this warpgroup observed
        self.waits = {}                   # barrier id -> phases this warpgroup waited for
        self.stores = []                  # TMA store groups still reading SMEM: [[(SMEM
        #                                   Footprint, GMEM Footprint, reduction?), ...], ...]
        self.store_writes = []            # TMA store groups still writing GMEM (same entries)
        self.uncommitted_stores = []      # TMA stores not yet committed to a group
        self.async_proxy = None           # the async-proxy operation whose accesses are being
        #                                   made (through_async_proxy)
        self.wgmma = []                   # in-flight wgmma: (accumulator ref, operand Footprints)
        self.scoped_counts = {}
        self.epoch = 1                    # this warpgroup's releases so far (barrier arrivals) + 1
        self.tensor_core_ops = []         # tcgen05 operations this thread issued (TensorCoreOp)
        self.in_tensor_pipe = False       # reading an operand for a tcgen05 op it issues
        self.tmem_stores = []             # its async_store_tmem records before commit_tmem
        self.tmem_loads = []              # async_load_tmem records before wait_load_tmem
        self.warps = {}                   # warp id -> WarpRun of this warpgroup's warp_maps
        self.cancel_calls = 0             # try_cluster_cancel calls so far
        self.tests = 0                    # barrier_test calls so far
        self.fruitless = {}               # barrier id -> what a test answering False last saw
        self.cp_async = []                # cp.async groups in flight: [Footprint of SMEM written]
        self.tensor_known = {}            # what it knew at its last wait on a barrier that
        #                                   orders the tensor core (tcgen05.pipelined_into)
        self.diverged = {}                # barrier id -> the phases its warps observed, where
        #                                   they differ (warps._join_phases)

    @contextlib.contextmanager
    def through_async_proxy(self, what: str):
        """The SMEM accesses made in this block are ``what``'s, an operation of the async proxy (TMA,
        wgmma and tcgen05 operands): each is checked against the thread's plain SMEM writes not
        yet fenced by a commit_smem (tma.check_proxy)."""
        self.async_proxy = what
        try:
            yield
        finally:
            self.async_proxy = None

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

    def signalled(self, ref) -> None:
        join(semaphore_clock(ref.array, create=True), self.release())

    def waited(self, ref) -> None:
        clock = semaphore_clock(ref.array)
        if clock:
            join(self.known, clock)

    # -- waits ----------------------------------------------------------------------------------
    def wait_until(self, ready, description: str) -> None:
        wait_until(ready, description, lambda d: DeadlockError(
            f"{self.where()}: deadlock: {d}, and no other warpgroup or copy can complete it"))

    def wait_barrier(self, barrier) -> None:
        """barrier_wait: the warpgroup's next phase of ``barrier`` (its k-th wait waits for
        phase k: Mosaic GPU tracks the phase parity per thread, PTX mbarrier.try_wait.parity)."""
        self._check_phases_agree(barrier)
        phase = self.waits.get(id(barrier), 0)
        self.wait_until(lambda: barrier.completed > phase,
                        f"{self.where()} waits for phase {phase} of {barrier.describe()}")
        self._observe(barrier, phase)

    def _check_phases_agree(self, barrier) -> None:
        phases = self.diverged.get(id(barrier))
        if phases is not None:
            raise BarrierError(
                f"barrier_wait/c1: {self.where()}: waits on barrier '{barrier.name}' after a "
                "warp_map in which its "
                f"warps observed different phases of it ({phases}, per warp): each warp waits on "
                "its own phase parity (mbarrier.try_wait.parity), so the warpgroup's wait is "
                "undefined")

    def _observe(self, barrier, phase: int) -> None:
        """The warpgroup observed the completion of its next phase ``phase`` of ``barrier``."""
        if barrier.completed > phase + 1:
            raise BarrierError(f"{self.where()}: waits for phase {phase} of barrier "
                               f"'{barrier.name}' when phase {barrier.completed - 1} already "
                               "completed (a parity wait cannot tell the two apart)")
        self.waits[id(barrier)] = phase + 1
        join(self.known, barrier.knowledge[phase])
        if barrier.orders_tensor_core:   # tcgen05.fence::after_thread_sync
            join(self.tensor_known, self.known)

    def test_barrier(self, barrier) -> bool:
        """barrier_test (spec/pallas_mosaic_gpu.py BARRIER_TEST): whether the warpgroup's next
        phase of ``barrier`` completed, observed as barrier_wait observes it when it did. A phase
        not complete yet: the other cores that can go on run first (the test is made as late as
        the schedule allows), except under grid_order="shuffled", which answers False at once
        for a seeded half of such tests. A second test answering False after nothing changed
        (no other core ran, the barrier and this warpgroup's releases as they were) is a poll
        loop that never ends: DeadlockError."""
        self._check_phases_agree(barrier)
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

    def arrive(self, barrier) -> None:
        # A release: what this warpgroup wrote before it is visible to whoever observes the
        # phase this arrival completes.
        if barrier.orders_tensor_core:   # tcgen05.fence::before_thread_sync
            for op in self.tensor_core_ops:
                if op.fenced is None:
                    op.fenced = self.epoch
        barrier.arrive(self.release())
