"""Blackwell's tensor core (tcgen05) and tensor memory (TMEM) as whole operations, what they
leave in flight and what a thread may not touch meanwhile. A rule of
``interp/rules/pallas_mosaic_gpu.py`` parses its equation's operands and calls one operation; the
arithmetic of an MMA is the rule's, passed in as ``product``.

The tensor core's operations (tcgen05.mma, tcgen05.cp) are asynchronous: the reference does them
at issue and records them in flight (:class:`TensorCoreOp`) until a barrier phase that a commit
of the issuing thread arrives on (tcgen05_commit_arrive, or the barrier operand of tcgen05_mma,
which Mosaic GPU lowers to the mma followed by tcgen05.commit) is observed by the accessing
thread. TMEM loads (``async_load_tmem``) read until ``wait_load_tmem``; TMEM stores
(``async_store_tmem``) are not visible before ``commit_tmem``.

Pipelined pairs (PTX ISA 9.7.16.6 tcgen05 memory consistency, "pipelined tcgen05 instructions"):
a tcgen05.mma after a tcgen05.mma or tcgen05.cp is ordered after it in the tensor pipe when the
same thread issues both, or when the earlier one's thread arrived on a barrier that orders the
tensor core (tcgen05.fence::before_thread_sync) after issuing it and the later one's thread
observed that through a wait on such a barrier (fence::after_thread_sync) before issuing it; a
commit of the later one's thread then tracks both. Any other pair of tensor-core operations
touching the same memory, one of them writing, is unordered until a commit tracking the earlier
one is observed (an mma then a cp into its accumulator, two cps into one TMEM, two threads'
mmas into one accumulator without the fenced barrier).
"""
from __future__ import annotations

import numpy as np

from ..memory import indexed_shape
from .errors import AsyncAccessError
from .races import Footprint


def mma(run, accs, a, b, accumulate: bool, product, barriers=None) -> None:
    """tcgen05_mma, issued by ``run`` for each block it acts on (its own, or both of a collective
    pair, block i of the pair holding rows i of acc and a and columns i of b: primitives.py
    tcgen05_mma): ``accs[i]`` (TMEM), ``a[i]``, ``b[i]`` ((ref, index) each) of block i;
    acc_i = product(acc_i or 0.0 when not ``accumulate``, a_i, [b_0 | b_1 ...]). In flight
    until a commit tracking it is observed; ``barriers`` (the mma's own barrier operand, one per
    block) commit it at once (Mosaic GPU lowers it to the mma then tcgen05.commit)."""
    operands = [(_pipe_read(run, a_i, "tcgen05_mma"), _pipe_read(run, b_i, "tcgen05_mma"))
                for a_i, b_i in zip(a, b)]
    bv = np.concatenate([b_i for _, (b_i, _) in operands], axis=1)
    writes, reads = [], []
    for acc, ((_, a_region), (_, b_region)) in zip(accs, operands):
        writes.append(Footprint(*acc))
        reads += [a_region, b_region]
    _issue(run, TensorCoreOp("tcgen05_mma", run, writes, reads, "mma"))
    for (ref, index), ((av, _), _) in zip(accs, operands):
        # The tensor core's own accumulator access bypasses the in-flight check (ordered in its
        # pipe).
        old = ref.array[index] if accumulate else 0.0
        ref.array[index] = product(old, av, bv)
    if barriers is not None:
        commit(run, barriers)


def cp(run, src, dst) -> None:
    """tcgen05.cp (async_copy_smem_to_tmem): ``src`` ((ref, index), SMEM) into ``dst`` (TMEM), in
    flight until a commit tracking it is observed."""
    value, src_region = _pipe_read(run, src, "tcgen05.cp (async_copy_smem_to_tmem)")
    dst_ref, dst_index = dst
    _issue(run, TensorCoreOp("tcgen05.cp (async_copy_smem_to_tmem)", run,
                             [Footprint(dst_ref, dst_index)], [src_region], "cp"))
    dst_ref.array[dst_index] = value.reshape(np.shape(dst_ref.array[dst_index]))


def _pipe_read(run, operand, what):
    """(value, Footprint) of a tcgen05 operand ((ref, index), SMEM or TMEM) read by the tensor
    core that ``run`` drives: ordered after the thread's earlier tcgen05 operations (the tensor
    pipe runs them in order), checked against everything else in flight. The tensor core reads
    SMEM through the async proxy (PTX ISA tcgen05.mma / tcgen05.cp: shared memory descriptors;
    a plain write needs commit_smem first: commit_smem/c1)."""
    ref, index = operand
    run.in_tensor_pipe = True
    try:
        with run.through_async_proxy(what):
            return ref.read(index), Footprint(ref, index)
    finally:
        run.in_tensor_pipe = False


def _issue(run, op: "TensorCoreOp") -> None:
    """A tcgen05 operation issued (in flight from now on): its writes checked against the
    tensor core's other operations in flight that are not ordered before it."""
    cluster = run.cluster
    check_tmem_write(cluster, op.issuer, op.writes)
    for other in cluster.tensor_core:
        if other.observed_by(run):
            continue
        if _pipelined(other, op):
            if other.issuer is not run:
                op.after.append(other)
            continue
        for w in op.writes:
            touched = next((x for x in other.writes + other.reads if w.overlaps(x)), None)
            if touched is not None:
                how = "writes" if any(w.overlaps(x) for x in other.writes) else "reads"
                raise AsyncAccessError(
                    f"tcgen05_mma/c3: {run.where()}: {op.what} writes {w.describe()} while a "
                    f"{other.what} of "
                    f"{'this thread' if other.issuer is run else other.issuer.where()} still "
                    f"{how} it ({touched.describe()}): the two are not pipelined (PTX ISA "
                    f"tcgen05 pipelined pairs) and {other.guard_text()}")
    cluster.tensor_core.append(op)
    op.issuer.tensor_core_ops.append(op)


# (earlier kind, later kind) the tensor pipe keeps in order (PTX ISA 9.7.16.6.x).
_PIPELINED = {("mma", "mma"), ("cp", "mma")}


def _pipelined(earlier, later) -> bool:
    return (earlier.kind, later.kind) in _PIPELINED and (
        earlier.issuer is later.issuer or pipelined_into(earlier, later.issuer))


def pipelined_into(op, run) -> bool:
    """Whether ``op`` (another thread's) is ordered before ``run``'s later tensor-core
    operations: its thread arrived on a tensor-core-ordering barrier after issuing it, and
    ``run`` has waited on such a barrier since knowing that arrival."""
    return op.fenced is not None and run.tensor_known.get(id(op.issuer), 0) >= op.fenced


# -- TMEM loads and stores of a thread ---------------------------------------------------------------

def tmem_load(run, src):
    """async_load_tmem (tcgen05.ld): the value of ``src`` ((ref, index), TMEM), read until the
    thread's wait_load_tmem retires the load (a write of those elements before is undefined)."""
    ref, index = src
    value = ref.read(index)
    record = [Footprint(ref, index), run, None]
    run.cluster.tmem_loads.append(record)
    run.tmem_loads.append(record)
    return value


def wait_tmem_loads(run) -> None:
    """wait_load_tmem (tcgen05.wait::ld): the thread's loads are retired; its next barrier
    arrival carries the retirement to other threads."""
    for record in run.tmem_loads:
        record[2] = run.epoch
    run.tmem_loads = []


def tmem_store(run, dst, value) -> None:
    """async_store_tmem (tcgen05.st): ``value`` into ``dst`` ((ref, index), TMEM), not visible to
    the thread's own reads before commit_tmem, nor to other threads before a barrier arrival of
    the storer made after its commit_tmem (the arrival carries no pending store). Two stores to
    the same TMEM with no commit_tmem between race (st -> st is not a pipelined pair)."""
    ref, index = dst
    footprint = Footprint(ref, index)
    cluster = run.cluster
    check_tmem_write(cluster, run, [footprint])
    for earlier in run.tmem_stores:
        if footprint.overlaps(earlier[0]):
            raise AsyncAccessError(
                f"async_store_tmem/c1: {run.where()}: async_store_tmem writes "
                f"{footprint.describe()} while an "
                f"earlier async_store_tmem of this thread ({earlier[0].describe()}) is not "
                "committed (commit_tmem): two tcgen05.st are not pipelined")
    ref.write(index, np.asarray(value).reshape(indexed_shape(ref.array, index)))
    record = [footprint, run, None]
    cluster.tmem_stores = [r for r in cluster.tmem_stores
                           if not (r[1] is run and r[0].covered_by(footprint))]
    cluster.tmem_stores.append(record)
    run.tmem_stores.append(record)


def commit_tmem(run) -> None:
    """commit_tmem (tcgen05.wait::st): the thread's TMEM stores become visible (to its loads and
    MMAs, and through its next barrier arrival to others)."""
    for record in run.tmem_stores:
        record[2] = run.epoch
    run.tmem_stores = []


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
        if (run.in_tensor_pipe and (op.issuer is run or pipelined_into(op, run))) or \
                op.observed_by(run):
            continue
        if any(region.overlaps(w) for w in op.writes):
            raise AsyncAccessError(
                f"{run.where()}: {kind} of {region.describe()} while a {op.what} still writes "
                f"it: {op.guard_text()}")
        if kind != "read" and any(region.overlaps(r) for r in op.reads):
            raise AsyncAccessError(
                f"{run.where()}: {kind} of {region.describe()} while a {op.what} still reads "
                f"it: {op.guard_text()}")
    for f, storer, committed in cluster.tmem_stores:
        if storer is run:
            if kind == "read" and committed is None and region.overlaps(f):
                raise AsyncAccessError(
                    f"{run.where()}: read of {region.describe()}, which async_store_tmem "
                    "wrote with no commit_tmem since: the store is not visible yet")
        elif (committed is None or run.known.get(id(storer), 0) < committed) and \
                region.overlaps(f):
            raise AsyncAccessError(
                f"async_store_tmem/c1: {run.where()}: {kind} of {region.describe()}, which an "
                "async_store_tmem of "
                f"{storer.where()} wrote ({f.describe()}) with no commit_tmem of that thread "
                "ordered before this access by a barrier (an arrival carries no pending "
                "store)")


class TensorCoreOp:
    """A tcgen05 operation (tcgen05_mma, async_copy_smem_to_tmem) in flight: what it writes and
    reads, and the barrier phases whose completion shows it done (``guards``: every
    tcgen05_commit_arrive, or mma barrier, its thread issued after it; PTX ISA tcgen05.commit
    tracks all prior asynchronous tcgen05 operations of the thread)."""
    __slots__ = ("what", "issuer", "writes", "reads", "guards", "kind", "fenced", "after")

    def __init__(self, what, issuer, writes, reads, kind):
        self.what, self.issuer, self.writes, self.reads = what, issuer, writes, reads
        self.kind = kind          # "mma" / "cp" (pipelined pairs)
        self.guards = []
        self.fenced = None        # the issuer's epoch at its first arrival on a barrier that
        #                           orders the tensor core after issuing it
        self.after = []           # other threads' operations pipelined before this one

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
    tracked = list(run.tensor_core_ops)
    for op in run.tensor_core_ops:   # pipelined before this thread's: done before them
        tracked += [a for a in op.after if id(a) in live]
    for barrier in barriers:
        for op in tracked:
            op.guards.append((barrier, barrier.completed))
        run.arrive(barrier)
