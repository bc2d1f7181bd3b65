"""The Tensor Memory Accelerator's copies (and the cp.async copies of earlier GPUs): what they
write and read while in flight, and what a thread may not touch meanwhile.

* a TMA copy to SMEM (``copy_gmem_to_smem``) is in flight until its barrier's phase completed and
  the accessing thread observed that completion, directly (``barrier_wait``) or through a chain
  of barriers (``interp.pallas.mosaic_gpu.races``);
* a cp.async copy (``copy_gmem_to_smem`` without a barrier) writes its SMEM destination until
  ``wait_gmem_to_smem`` of the issuing thread retires it;
* a TMA store (``copy_smem_to_gmem``) reads its SMEM source until ``wait_smem_to_gmem`` of the
  issuing thread retires its commit group; a thread must not end with stores in flight.
"""
from __future__ import annotations

from .errors import AsyncAccessError


def track_copy(cluster, region, barrier) -> None:
    """A TMA write of ``region`` (SMEM) guarded by the current phase of ``barrier``."""
    cluster.tma = [t for t in cluster.tma if not region.overlaps(t[0])]
    cluster.tma.append((region, barrier, barrier.completed))


def commit_stores(run) -> None:
    """commit_group: the thread's TMA stores not yet committed become one store group."""
    if run.uncommitted_stores:
        run.stores.append(run.uncommitted_stores)
        run.uncommitted_stores = []


def wait_stores(run, n: int) -> None:
    """wait_smem_to_gmem(n): at most n committed store groups stay in flight."""
    if len(run.stores) > n:
        del run.stores[:len(run.stores) - n]


def wait_cp_async(run, n: int) -> None:
    """wait_gmem_to_smem(n): at most n cp.async groups (one per copy) stay in flight."""
    if len(run.cp_async) > n:
        del run.cp_async[:len(run.cp_async) - n]


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
