"""Blackwell's tensor core (tcgen05) and tensor memory (TMEM): its asynchronous operations in
flight and what a thread may not touch meanwhile.

The tensor core's operations (tcgen05.mma, tcgen05.cp) are asynchronous: the reference does them
at issue and records them in flight (:class:`TensorCoreOp`) until a barrier phase that a commit
of the issuing thread arrives on (tcgen05_commit_arrive, or the barrier operand of tcgen05_mma,
which Mosaic GPU lowers to the mma followed by tcgen05.commit) is observed by the accessing
thread. TMEM loads (``async_load_tmem``) read until ``wait_load_tmem``; TMEM stores
(``async_store_tmem``) are not visible before ``commit_tmem``.
"""
from __future__ import annotations

from .errors import AsyncAccessError


def track(cluster, op: "TensorCoreOp") -> None:
    """A tcgen05 operation issued (in flight from now on)."""
    check_tmem_write(cluster, op.issuer, op.writes)
    cluster.tensor_core.append(op)
    op.issuer.tensor_core_ops.append(op)


def check_tmem_write(cluster, writer, footprints) -> None:
    """A write of TMEM an async_load_tmem may still read: undefined unless the loading thread
    retired the load (wait_load_tmem) and, for another writer, the writer observed a barrier
    arrival the loader made after that wait."""
    for f in footprints:
        for loaded, reader, retired in cluster.tmem_loads:
            if not loaded.overlaps(f):
                continue
            if retired is None or (reader is not writer and
                                   writer.known.get(id(reader), 0) < retired):
                raise AsyncAccessError(
                    f"{writer.where()}: write of {f.describe()} while an async_load_tmem of "
                    f"{reader.where()} may still read it (no wait_load_tmem"
                    f"{'' if retired is None else ' ordered before this write by a barrier'})")


def check_access(cluster, run, region, kind: str) -> None:
    """An access while a tcgen05 operation (mma, cp) may still write it, or still reads it and
    the access writes: undefined until the accessor observed a barrier phase a
    tcgen05_commit_arrive (or the mma's own barrier) completes after the operation. TMEM a
    thread stored to (async_store_tmem) is not visible to its own reads before commit_tmem."""
    for op in cluster.tensor_core:
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


def commit(run, barriers) -> None:
    """tcgen05.commit to ``barriers`` (one; both of a block pair for a collective commit): every
    tcgen05 operation ``run`` issued so far completes before the arrival; the reference's
    operations are done at issue, so it arrives now."""
    live = set(map(id, run.cluster.tensor_core))
    run.tensor_core_ops = [op for op in run.tensor_core_ops if id(op) in live]
    for barrier in barriers:
        for op in run.tensor_core_ops:
            op.guards.append((barrier, barrier.completed))
        run.arrive(barrier)
