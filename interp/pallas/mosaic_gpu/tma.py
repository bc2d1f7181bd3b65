"""The Tensor Memory Accelerator's copies (and the cp.async copies of earlier GPUs, and st.async
stores), as whole operations: each moves its data at issue and records what stays in flight, and
the checks below say what a thread may not touch meanwhile. A rule of
``interp/rules/pallas_mosaic_gpu.py`` parses its equation's operands and calls one operation.

* a TMA copy to SMEM (``copy_gmem_to_smem``) is in flight until its barrier's phase completed and
  the accessing thread observed that completion, directly (``barrier_wait``) or through a chain
  of barriers (``interp.pallas.mosaic_gpu.races``);
* a cp.async copy (``copy_gmem_to_smem`` without a barrier) writes its SMEM destination until
  ``wait_gmem_to_smem`` of the issuing thread retires it;
* a TMA store (``copy_smem_to_gmem``) reads its SMEM source until ``wait_smem_to_gmem`` of the
  issuing thread retires its commit group (``wait_read_only=True`` too), and writes its GMEM
  destination until a ``wait_smem_to_gmem`` with ``wait_read_only=False`` retires it; a thread
  must not end with stores reading SMEM. Any thread's access is checked against every thread's
  stores in flight (another thread's wait retires none of them);
* the TMA unit reads and writes SMEM through the async proxy: a thread's plain SMEM write is
  visible to it only through a ``commit_smem`` (fence.proxy.async) ordered after the write and
  before the TMA operation (``generic_write``, ``fence_smem``, ``check_proxy``).
"""
from __future__ import annotations

import numpy as np

from ...schedule import report_race
from ..memory import indexed_shape
from .errors import AsyncAccessError, TmaRaceError
from .races import Footprint


# -- copies to SMEM, completing on a barrier ------------------------------------------------------
# arrive.expect_tx(bytes) by the issuing thread, complete_tx(bytes) by the TMA unit as the data
# lands: the destination is in flight until the thread that accesses it observed the phase.

def copy(run, src, dst, barrier) -> None:
    """copy_gmem_to_smem (PTX cp.async.bulk.tensor): ``src`` ((ref, index), GMEM) into ``dst``
    ((ref, index), SMEM), its bytes completing on ``barrier``."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    with run.through_async_proxy("TMA copy (copy_gmem_to_smem)"):
        value = src_ref.read(src_index)
        # Checked first under its own name, so an undefined overwrite names the TMA copy (SMEM
        # an un-waited wgmma or TMA store still reads) rather than a plain write.
        run.cluster.check_access(dst_ref, dst_index, "TMA copy (copy_gmem_to_smem) write")
        dst_ref.write(dst_index, value.reshape(indexed_shape(dst_ref.array, dst_index)))
    barrier.expect_tx(value.nbytes)
    _in_flight(run.cluster, Footprint(dst_ref, dst_index), barrier)
    _reading(run.cluster, Footprint(src_ref, src_index), barrier)
    run.arrive(barrier)
    barrier.complete_tx(value.nbytes)


def _reading(cluster, region, barrier) -> None:
    """A TMA copy's read of ``region`` (GMEM) guarded by the current phase of ``barrier``: a
    write of it before the writer observed that phase races with the read (copy_gmem_to_smem/c5).
    Entries whose barrier completed a later phase too are dropped (a thread waiting on it in
    order has observed them), so the list stays as short as the copies in flight."""
    cluster.tma_sources = [t for t in cluster.tma_sources if t[1].completed <= t[2] + 1]
    cluster.tma_sources.append((region, barrier, barrier.completed))


def check_sources(cluster, run, region, kind: str) -> None:
    """A write of GMEM a TMA copy still reads (the writer has not observed the barrier phase
    that guards the copy)."""
    for source, barrier, phase in cluster.tma_sources:
        if run.known.get(id(barrier), 0) <= phase and region.overlaps(source):
            report_race(run, TmaRaceError(
                f"copy_gmem_to_smem/c5: {run.where()}: {run.async_proxy or kind} of "
                f"{region.describe()} while a TMA copy (copy_gmem_to_smem) may still read it "
                f"({source.describe()}): phase {phase} of barrier '{barrier.name}' that guards "
                "the copy was not observed (barrier_wait) by this warpgroup"))
            return


def copy_multicast(run, src, dst_index, barrier, group) -> None:
    """A multicast copy over the blocks of a cluster (copy_gmem_to_smem with collective_axes;
    PTX cp.async.bulk.tensor .multicast::cluster): the blocks of the collective ``group`` ((block,
    its dst ref, its barrier) in the group's order, this thread's block included) each load a
    slice of ``src`` and multicast it, so every block's dst (``dst_index``) receives all of
    ``src``; each block arrives once on its own ``barrier`` expecting all the bytes, and every
    slice completes its bytes on the barrier of every block it lands in."""
    src_ref, src_index = src
    value = src_ref.read(src_index)
    cluster = run.cluster
    me = [block for block, _, _ in group].index(run.block)
    shape = np.shape(group[me][1].array[dst_index])
    slices = np.array_split(value.reshape(shape), len(group), axis=0)
    barrier.expect_tx(value.nbytes)
    run.arrive(barrier)
    piece = slices[me]
    start = sum(p.shape[0] for p in slices[:me])
    for _, ref, bar in group:
        view = np.array(ref.array[dst_index])   # (a copy: the index may be an array)
        view[start:start + piece.shape[0]] = piece
        ref.array[dst_index] = view   # written by the TMA unit, not a thread
        _in_flight(cluster, Footprint(ref, dst_index), bar)
        bar.complete_tx(piece.nbytes, known=run.release())


def copy_partitioned(run, src, dst, axis: int, leader, blocks) -> None:
    """A PARTITIONED copy over the blocks of a cluster (copy_gmem_to_smem with leader_tracked):
    block i of the collective group ``blocks`` receives the i-th of equal slices of ``src`` along
    dst's ``axis``; only the group's leader arrives (expecting every slice's bytes) and every
    slice completes its bytes on the leader's barrier (``leader``)."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    value = src_ref.read(src_index)
    me = blocks.index(run.block)
    shape = np.shape(dst_ref.array[dst_index])
    piece = np.split(value, len(blocks), axis=axis)[me]
    if me == 0:
        leader.expect_tx(value.nbytes)
    with run.through_async_proxy("TMA copy (copy_gmem_to_smem, partitioned)"):
        dst_ref.write(dst_index, piece.reshape(shape))
    _in_flight(run.cluster, Footprint(dst_ref, dst_index), leader)
    if me == 0:
        run.arrive(leader)
    leader.complete_tx(piece.nbytes, known=run.release())


def store_async(run, value, dst, barrier, combine=None) -> None:
    """st.async (async_store_smem): a register array ``value`` into ``dst`` ((ref, index): SMEM of
    a block of the cluster), optionally atomic (``combine(old, new)``), completing its bytes on
    that block's ``barrier`` (one warpgroup-level arrival with expect-tx, the stores complete
    them): in flight until that phase is observed, as a TMA copy's destination."""
    ref, index = dst
    value = np.asarray(value).reshape(np.shape(ref.array[index]))
    if combine is not None:
        old = np.asarray(ref.array[index])
        with np.errstate(over="ignore"):
            value = np.asarray(combine(old, value)).astype(old.dtype)
    barrier.expect_tx(value.nbytes)
    ref.write(index, value)
    _in_flight(run.cluster, Footprint(ref, index), barrier)
    run.arrive(barrier)
    barrier.complete_tx(value.nbytes)


def deliver(run, words, responses) -> None:
    """The response of a cluster launch control request (try_cluster_cancel) multicast to every
    block of the cluster (mosaic/gpu/utils.py try_cluster_cancel: .multicast::cluster::all):
    ``words`` (int32) into each (ref, index, barrier) of ``responses``, 16 bytes completing on
    each barrier."""
    cluster = run.cluster
    for ref, index, bar in responses:
        ref.array[index] = words.view(ref.dtype).reshape(np.shape(ref.array[index]))
        _in_flight(cluster, Footprint(ref, index), bar)
        bar.complete_tx(16, known=run.release())


def _in_flight(cluster, region, barrier) -> None:
    """A TMA write of ``region`` (SMEM) guarded by the current phase of ``barrier``."""
    cluster.tma = [t for t in cluster.tma if not region.overlaps(t[0])]
    cluster.tma.append((region, barrier, barrier.completed))


# -- cp.async: copies to SMEM retired by wait_gmem_to_smem ----------------------------------------

def cp_async(run, src, dst) -> None:
    """copy_gmem_to_smem without a barrier: cp.async (Mosaic GPU before Hopper,
    launch_context.py async_copy: the warpgroup's cp.async.shared.global copies, then
    cp.async.commit_group): one group per copy, in flight until wait_gmem_to_smem retires it."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    value = src_ref.read(src_index)
    run.cluster.check_access(dst_ref, dst_index, "cp.async copy (copy_gmem_to_smem) write")
    dst_ref.write(dst_index, value.reshape(indexed_shape(dst_ref.array, dst_index)))
    run.cp_async.append(Footprint(dst_ref, dst_index))


def wait_cp_async(run, n: int) -> None:
    """wait_gmem_to_smem(n): at most n cp.async groups (one per copy) stay in flight."""
    if len(run.cp_async) > n:
        del run.cp_async[:len(run.cp_async) - n]


# -- TMA stores: SMEM to GMEM, retired by wait_smem_to_gmem ---------------------------------------

def store(run, src, dst, combine=None, commit: bool = False) -> None:
    """copy_smem_to_gmem (PTX cp.async.bulk.tensor .global.shared / cp.reduce.async.bulk with
    ``combine(old, new)``): ``src`` (SMEM) into ``dst`` (GMEM), the destination written at issue;
    the source is read until wait_smem_to_gmem retires the store's commit group, the destination
    written until a wait_smem_to_gmem(wait_read_only=False) does (``commit``: the store commits
    its group, as commit_group)."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    with run.through_async_proxy(REDUCTION if combine is not None
                                 else "TMA store (copy_smem_to_gmem)"):
        value = src_ref.read(src_index)
        if combine is not None:
            old = np.asarray(dst_ref.read(dst_index))
            with np.errstate(over="ignore"):   # integer add wraps, as the TMA's does
                value = np.asarray(combine(old, np.asarray(value).reshape(old.shape))).astype(
                    old.dtype)
        dst_ref.write(dst_index, value.reshape(indexed_shape(dst_ref.array, dst_index)))
    run.uncommitted_stores.append(
        (Footprint(src_ref, src_index), Footprint(dst_ref, dst_index), combine is not None))
    storing = run.cluster.launch.storing
    if run not in storing:
        storing.append(run)
    if commit:
        commit_stores(run)


# cp.reduce.async.bulk's element updates are atomic (PTX ISA 9.7.9.25.4.2: .relaxed.gpu), so
# two reduction stores in flight to one GMEM element do not race.
REDUCTION = "TMA reduction store (copy_smem_to_gmem with reduction_op)"


# -- the async proxy's view of SMEM ----------------------------------------------------------------
# PTX ISA 8.6 (proxies) and 9.7.13.x fence.proxy.async: the TMA unit accesses SMEM through the
# async proxy, and a write made through the generic proxy (a thread's plain store) is ordered
# before an async-proxy access only through a fence.proxy.async (Mosaic GPU's commit_smem) made by
# a thread that knows the write, ordered before the TMA operation's issue. Each plain SMEM write
# keeps the fences that cover it: (the fencing thread, its epoch then).

def generic_write(cluster, run, region) -> None:
    """A plain write of SMEM by ``run`` (the newest over the older of the same thread it covers)."""
    cluster.generic = [g for g in cluster.generic
                       if not (g[1] is run and g[0].covered_by(region))]
    cluster.generic.append((region, run, run.epoch, {}))


def fence_smem(run) -> None:
    """commit_smem (fence.proxy.async.shared::cta): the plain SMEM writes ``run`` knows (its own,
    and others' ordered before it by barriers) become visible to TMA operations ordered after
    this fence (issued later by ``run``, or by a thread that observed a release of ``run`` made
    after it)."""
    known = run.known
    for _, writer, epoch, fences in run.cluster.generic:
        if id(run) not in fences and (writer is run or known.get(id(writer), 0) >= epoch):
            fences[id(run)] = (run, run.epoch)


def check_proxy(cluster, run, region) -> None:
    """A TMA operation of ``run`` (``run.async_proxy`` names it) touching SMEM: every plain write
    of it ordered before the operation must be covered by a fence ordered before it too (a write
    not ordered before it at all is check_shared's race)."""
    known = run.known
    for footprint, writer, epoch, fences in cluster.generic:
        if (writer is run or known.get(id(writer), 0) >= epoch) and region.overlaps(footprint) \
                and not any(t is run or known.get(id(t), 0) >= fe for t, fe in fences.values()):
            who = "this warpgroup" if writer is run else writer.where()
            report_race(run, TmaRaceError(
                f"commit_smem/c1: {run.where()}: {run.async_proxy} accesses "
                f"{region.describe()}, which {who} "
                f"wrote with a plain store ({footprint.describe()}) with no commit_smem "
                "(fence.proxy.async) ordered between that write and this TMA operation: the TMA "
                "unit (the async proxy) may not see the write"))
            return


def commit_stores(run) -> None:
    """commit_group: the thread's TMA stores not yet committed become one store group, in flight
    on both sides (SMEM read, GMEM write)."""
    if run.uncommitted_stores:
        run.stores.append(run.uncommitted_stores)
        run.store_writes.append(run.uncommitted_stores)
        run.uncommitted_stores = []


def wait_stores(run, n: int, read_only: bool = False) -> None:
    """wait_smem_to_gmem(n, wait_read_only): at most n committed store groups of this thread
    still read SMEM, and, unless ``read_only`` (cp.async.bulk.wait_group.read), still write
    GMEM."""
    if len(run.stores) > n:
        del run.stores[:len(run.stores) - n]
    if not read_only and len(run.store_writes) > n:
        del run.store_writes[:len(run.store_writes) - n]
    _update_storing(run)


def _update_storing(run) -> None:
    if not (run.stores or run.store_writes or run.uncommitted_stores):
        storing = run.cluster.launch.storing
        if run in storing:
            storing.remove(run)


def hand_over_stores(warp, warpgroup) -> None:
    """The join of a warp_map: the warp's TMA stores in flight become its warpgroup's (its
    uncommitted stores a group of their own)."""
    extra = [warp.uncommitted_stores] if warp.uncommitted_stores else []
    warpgroup.stores += warp.stores + extra
    warpgroup.store_writes += warp.store_writes + extra
    warp.stores, warp.store_writes, warp.uncommitted_stores = [], [], []
    _update_storing(warp)
    storing = warpgroup.cluster.launch.storing
    if (warpgroup.stores or warpgroup.store_writes) and warpgroup not in storing:
        storing.append(warpgroup)


def check_retired(run) -> None:
    """The thread ends: none of its TMA stores may still read SMEM."""
    if run.stores or run.uncommitted_stores:
        stores = [st for g in run.stores for st in g] + run.uncommitted_stores
        raise AsyncAccessError(f"{run.where()}: the warpgroup ends with TMA stores still "
                               f"reading SMEM ({stores[0][0].describe()}): no wait_smem_to_gmem "
                               "retired them")
    _update_storing(run)   # (stores writing GMEM at exit are allowed: wait_read_only=True)


def cluster_finished(cluster) -> None:
    """The last thread of ``cluster`` ended: its stores still writing GMEM are no longer
    checked (the reference checks GMEM against the stores of the clusters that run, not against
    the tails of finished ones: a grid's clusters would otherwise all stay in the list)."""
    launch = cluster.launch
    launch.storing = [r for r in launch.storing if r.cluster is not cluster]


# -- what an access of a thread may not touch -------------------------------------------------------

def check_cp_async(run, region, kind: str) -> None:
    """An access of SMEM a cp.async copy of the thread still writes."""
    for copy_region in run.cp_async:
        if region.overlaps(copy_region):
            raise AsyncAccessError(
                f"{run.where()}: {kind} of {region.describe()} while a cp.async copy is "
                "still writing it (before wait_gmem_to_smem retired it)")


def check_copies(cluster, run, region, kind: str) -> None:
    """An access of SMEM a TMA copy still writes: the thread has not observed the barrier phase
    that guards it. A race with the TMA unit: recorded under on_race="record" (the copy wrote
    its data at issue: mosaic_gpu/recorded-race), as JAX's detector records it."""
    for tma_region, barrier, phase in cluster.tma:
        if run.known.get(id(barrier), 0) <= phase and region.overlaps(tma_region):
            report_race(run, AsyncAccessError(
                f"{run.where()}: {kind} of {region.describe()} while a TMA copy is still "
                f"writing it: phase {phase} of barrier '{barrier.name}' that guards the copy "
                "was not observed (barrier_wait) by this warpgroup"))
            return


def check_stores(run, region, kind: str) -> None:
    """An access checked against the TMA stores in flight of every thread of the launch: a write
    of SMEM a store still reads, any access of GMEM a store still writes (two reduction stores
    excepted). A thread's wait retires its own stores only (bulk async-groups are per thread)."""
    reduction = run.async_proxy == REDUCTION
    for other in run.cluster.launch.storing:
        own = other is run
        if kind != "read":
            for group in other.stores + [other.uncommitted_stores]:
                for smem, _, _ in group:
                    if region.overlaps(smem):
                        if own:
                            raise AsyncAccessError(
                                f"{run.where()}: {kind} of {region.describe()} while a TMA store "
                                "still reads it (before wait_smem_to_gmem)")
                        report_race(run, TmaRaceError(
                            f"copy_smem_to_gmem/c2: {run.where()}: {kind} of {region.describe()} "
                            f"while a TMA store of {other.where()} still reads it "
                            f"({smem.describe()}; that thread's wait_smem_to_gmem did not "
                            "retire it before this access)"))
                        return
        for group in other.store_writes + [other.uncommitted_stores]:
            for _, gmem, reducing in group:
                if not (reduction and reducing) and region.overlaps(gmem):
                    who = "this warpgroup" if own else other.where()
                    what = run.async_proxy or kind
                    report_race(run, TmaRaceError(
                        f"copy_smem_to_gmem/c1: {run.where()}: {what} of {region.describe()} "
                        f"while a TMA store of {who} may still write it ({gmem.describe()}): no "
                        "wait_smem_to_gmem(wait_read_only=False) of that thread retired the "
                        "store before this access"))
                    return
