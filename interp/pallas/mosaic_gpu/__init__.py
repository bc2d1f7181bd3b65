"""The Pallas Mosaic GPU engine (``plgpu``): GPU kernels over a mesh of grid, cluster and threads,
their blocks, warpgroups and mbarriers, and the asynchronous operations they order. It sits on
the dialect-free core (``interp.pallas``) and imports no rule module; the dialect's rules
(``interp/rules/pallas_mosaic_gpu.py``) parse an equation's operands and call one operation here.

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
undefined behaviour, raised as ``AsyncAccessError`` naming kernel, block, warpgroup and buffer.
Warpgroups sharing SMEM: a write by one warpgroup must be ordered before another warpgroup's
access by a barrier phase (the writer arrives after writing; the accessor observes the phase):
otherwise the value depends on the schedule (``WarpgroupRaceError``). Each arrival carries what
its warpgroup wrote and observed (a vector clock over warpgroups and barrier phases). The TMA
unit accesses SMEM through the async proxy: a plain SMEM write reaches a TMA copy or store only
through a ``commit_smem`` (fence.proxy.async) ordered between them, and a TMA store writes GMEM
until a full ``wait_smem_to_gmem`` of its thread (``TmaRaceError``, a RaceError, otherwise).
Clusters sharing GMEM: an access to GMEM another cluster of the launch accessed, one of the two a
write, must be ordered after it by semaphores (signals release, waits acquire, in the same vector
clocks): otherwise ``ClusterRaceError``.

Modules, bottom up:

* ``errors``: the undefined behaviour raised (AsyncAccessError, BarrierError,
  WarpgroupRaceError, ClusterRaceError, TmaRaceError, DeadlockError).
* ``races``: vector clocks, the footprints of accesses and operations, the SMEM race between
  warpgroups, the GMEM race between clusters.
* ``warpgroup``: ``WarpgroupRun``, one warpgroup as it runs (waits, barrier phases observed,
  scoped allocations).
* ``barriers``: mbarriers and the scratch refs that hold them.
* ``tma``, ``wgmma``, ``tcgen05``: the asynchronous operations, each with its ordering and race
  rules: TMA copies, cp.async and TMA stores; wgmma; Blackwell's tensor core and TMEM.
* ``cluster``: ``ClusterState``, what a cluster's warpgroups share, and the check every access
  goes through.
* ``warps``: ``plgpu.warp_map``, the warps of a warpgroup.
* ``launch``: ``GpuMeshPlan`` (``plgpu.kernel``), the launch's clusters, GMEM and other devices.

Semantics and sources: ``spec/pallas_mosaic_gpu.py``.
"""
from .errors import (AsyncAccessError, BarrierError, ClusterRaceError, DeadlockError,  # noqa: F401
                     TmaRaceError, WarpgroupRaceError)
