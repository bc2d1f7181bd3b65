"""The undefined behaviour a Mosaic GPU kernel can show, as the reference raises it."""
from __future__ import annotations

from ...errors import RaceError, UndefinedBehaviorError


class AsyncAccessError(UndefinedBehaviorError):
    """An access to memory an asynchronous operation (TMA, wgmma, tcgen05) may still be reading
    or writing: before the barrier, wait or fence that orders it."""


class BarrierError(UndefinedBehaviorError):
    """Misuse of an mbarrier: a wait that skips a phase, more arrivals than a phase expects."""


class WarpgroupRaceError(RaceError):
    """Warpgroups accessing the same SMEM with no barrier ordering a write before the other
    access: the result depends on the schedule."""


class ClusterRaceError(RaceError):
    """Warpgroups of two clusters of a launch accessing the same GMEM, at least one writing, with
    no semaphore ordering them: clusters run concurrently in any order on the hardware."""


class TmaRaceError(RaceError):
    """An access racing with the async proxy (the TMA unit, the tensor core's SMEM reads): a TMA
    copy or store or a tcgen05 operation touching SMEM a thread wrote through the generic proxy
    with no commit_smem (fence.proxy.async) ordering the write before it, or an access to GMEM a
    TMA copy may still read or a TMA store may still write."""


class DeadlockError(UndefinedBehaviorError):
    """Every unfinished warpgroup waits and nothing can complete any of the waits."""
