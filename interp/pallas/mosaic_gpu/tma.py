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
  issuing thread retires its commit group; a thread must not end with stores in flight.
"""
from __future__ import annotations

import numpy as np

from ..memory import indexed_shape
from .errors import AsyncAccessError
from .races import Footprint


# -- copies to SMEM, completing on a barrier ------------------------------------------------------
# arrive.expect_tx(bytes) by the issuing thread, complete_tx(bytes) by the TMA unit as the data
# lands: the destination is in flight until the thread that accesses it observed the phase.

def copy(run, src, dst, barrier) -> None:
    """copy_gmem_to_smem (PTX cp.async.bulk.tensor): ``src`` ((ref, index), GMEM) into ``dst``
    ((ref, index), SMEM), its bytes completing on ``barrier``."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    value = src_ref.read(src_index)
    # Checked first under its own name, so an undefined overwrite names the TMA copy (SMEM an
    # un-waited wgmma or TMA store still reads) rather than a plain write.
    run.cluster.check_access(dst_ref, dst_index, "TMA copy (copy_gmem_to_smem) write")
    dst_ref.write(dst_index, value.reshape(indexed_shape(dst_ref.array, dst_index)))
    barrier.expect_tx(value.nbytes)
    _in_flight(run.cluster, Footprint(dst_ref, dst_index), barrier)
    run.arrive(barrier)
    barrier.complete_tx(value.nbytes)


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
    the source is read until wait_smem_to_gmem retires the store's commit group (``commit``:
    the store commits its group, as commit_group)."""
    src_ref, src_index = src
    dst_ref, dst_index = dst
    value = src_ref.read(src_index)
    if combine is not None:
        old = np.asarray(dst_ref.read(dst_index))
        with np.errstate(over="ignore"):   # integer add wraps, as the TMA's does
            value = np.asarray(combine(old, np.asarray(value).reshape(old.shape))).astype(old.dtype)
    dst_ref.write(dst_index, value.reshape(indexed_shape(dst_ref.array, dst_index)))
    run.uncommitted_stores.append(Footprint(src_ref, src_index))
    if commit:
        commit_stores(run)


def fence_smem(run) -> None:
    """commit_smem (fence.proxy.async.shared::cta): orders the thread's SMEM writes before later
    TMA reads of them. The reference's TMA reads see every earlier write, so it changes no value
    and nothing is checked here yet."""


def commit_stores(run) -> None:
    """commit_group: the thread's TMA stores not yet committed become one store group."""
    if run.uncommitted_stores:
        run.stores.append(run.uncommitted_stores)
        run.uncommitted_stores = []


def wait_stores(run, n: int) -> None:
    """wait_smem_to_gmem(n): at most n committed store groups stay in flight."""
    if len(run.stores) > n:
        del run.stores[:len(run.stores) - n]


def hand_over_stores(warp, warpgroup) -> None:
    """The join of a warp_map: the warp's TMA stores in flight become its warpgroup's (its
    uncommitted stores a group of their own)."""
    warpgroup.stores += warp.stores + ([warp.uncommitted_stores] if warp.uncommitted_stores
                                       else [])
    warp.stores, warp.uncommitted_stores = [], []


def stores_in_flight(run) -> bool:
    return bool(run.stores or run.uncommitted_stores)


def check_retired(run) -> None:
    """The thread ends: none of its TMA stores may still read SMEM."""
    if run.stores or run.uncommitted_stores:
        regions = [r for g in run.stores for r in g] + run.uncommitted_stores
        raise AsyncAccessError(f"{run.where()}: the warpgroup ends with TMA stores still "
                               f"reading SMEM ({regions[0].describe()}): no wait_smem_to_gmem "
                               "retired them")


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
    that guards it."""
    for tma_region, barrier, phase in cluster.tma:
        if run.known.get(id(barrier), 0) <= phase and region.overlaps(tma_region):
            raise AsyncAccessError(
                f"{run.where()}: {kind} of {region.describe()} while a TMA copy is still "
                f"writing it: phase {phase} of barrier '{barrier.name}' that guards the copy "
                "was not observed (barrier_wait) by this warpgroup")


def check_stores(run, region, kind: str) -> None:
    """A write of SMEM a TMA store of the thread still reads."""
    for group in run.stores + [run.uncommitted_stores]:
        for footprint in group:
            if region.overlaps(footprint):
                raise AsyncAccessError(f"{run.where()}: {kind} of {region.describe()} while "
                                       "a TMA store still reads it (before wait_smem_to_gmem)")
