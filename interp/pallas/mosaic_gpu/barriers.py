"""mbarriers (PTX ISA 9.7.13.15 mbarrier): phases completed by arrivals and transaction bytes,
and the scratch refs that hold them.

A phase completes when its expected arrival count arrived and its pending transaction bytes
(``expect_tx``, then ``complete_tx`` as a TMA copy lands) reached zero. Arrivals carry what the
arriving thread knows (a vector clock, ``interp.pallas.mosaic_gpu.races``); a completed phase
keeps the join of what its arrivals carried, for the threads that observe it.
"""
from __future__ import annotations

import numpy as np

from ..memory import KernelRef
from .errors import BarrierError
from .races import join
from .warpgroup import WarpgroupRun


class Barrier:
    """One mbarrier (PTX ISA 9.7.13.15): a phase completes when its expected arrival count
    arrived and its pending transaction bytes (TMA ``complete_tx``) reached zero; ``completed``
    counts completed phases."""
    __slots__ = ("name", "num_arrivals", "arrivals", "tx", "completed", "knowledge", "pending",
                 "orders_tensor_core")

    def __init__(self, name, num_arrivals, orders_tensor_core=False):
        self.name = name
        self.num_arrivals = int(num_arrivals)
        # Mosaic GPU brackets its arrivals and waits with tcgen05.fence::before_thread_sync /
        # after_thread_sync (primitives.py barrier_arrive / barrier_wait): the tensor core's
        # operations of an arriving thread are pipelined before those a waiter issues after.
        self.orders_tensor_core = bool(orders_tensor_core)
        self.arrivals = 0
        self.tx = 0
        self.completed = 0
        self.knowledge = []   # per completed phase: what its completion makes visible
        self.pending = {}     # what the arrivals of the current phase carry

    def arrive(self, known: dict, count: int = 1) -> None:
        join(self.pending, known)
        self.arrivals += count
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int, known: dict | None = None) -> None:
        if known:   # a copy issued by a thread that does not arrive here (cluster copies)
            join(self.pending, known)
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


def allocate(aval, name, run):
    """The refs of a barrier scratch operand (plgpu.Barrier, plgpu.ClusterBarrier), belonging to
    ``run`` (None: a run_scoped prototype, whose fresh copies count per cluster), or None for
    another aval."""
    dtype = getattr(aval, "dtype", None)
    kind = type(dtype).__name__
    if kind in ("BarrierType", "ClusterBarrierType"):
        collective = None
        if kind == "ClusterBarrierType":
            collective = (tuple(dtype.collective_axes), bool(getattr(dtype, "leader_tracked",
                                                                     False)))
        shape = tuple(aval.shape)
        array = np.empty(shape, object)
        for i in np.ndindex(shape):
            array[i] = Barrier(f"{name}{list(i) if shape else ''}", dtype.num_arrivals,
                               getattr(dtype, "orders_tensor_core", False))
        refs = BarrierRefs(array, name, run, collective)
        # run_scoped prototypes are made with no run; their fresh copies count per cluster.
        return refs if run is None else refs.fresh(run)
    return None


class BarrierRefs(KernelRef):
    """A ref of barriers: its elements are :class:`Barrier` objects. ``collective``: (cluster
    axes, leader_tracked) of a plgpu.ClusterBarrier, None for a block's own barrier."""
    __slots__ = ("collective",)

    def __init__(self, array, name, run, collective=None):
        super().__init__(array, name, run, kind="barrier")
        self.collective = collective

    def fresh(self, run):
        # A cluster barrier is one barrier per block; an arrival lands in every block of its
        # collective group (ClusterState.barrier_group; or in the group's leader,
        # leader_tracked), so each expects num_arrivals from each block of the group
        # (mosaic/gpu/utils.py CollectiveBarrierRef.initialize: arrival_count *
        # cluster_arrival_count).
        scale = 1
        if self.collective and isinstance(run, WarpgroupRun):
            scale = len(run.cluster.barrier_group(run.block, self.collective[0]))
        # (ravel and a list: np.ndindex costs more than the barriers, made per block and call)
        array = np.empty(self.array.size, object)
        array[:] = [Barrier(b.name, b.num_arrivals * scale, b.orders_tensor_core)
                    for b in self.array.ravel()]
        return BarrierRefs(array.reshape(self.array.shape), self.name, run, self.collective)
