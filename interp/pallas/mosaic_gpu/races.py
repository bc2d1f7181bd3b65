"""What orders the accesses of a Mosaic GPU kernel's threads: vector clocks over warpgroups and
barrier phases, the footprints of accesses and asynchronous operations, and the SMEM race between
warpgroups.

Each warpgroup keeps ``known``: what it has observed (per warpgroup, the epoch of that
warpgroup's releases; per barrier, the phases completed). An arrival on a barrier (a release)
carries what the arriving warpgroup knows, and a phase's completion joins what its arrivals
carried; a warpgroup that observes the phase (``barrier_wait``) joins that into its own (the PTX
memory model's release/acquire pattern of mbarriers). An access is ordered after a write when
the accessor knows the writer's epoch of that write.
"""
from __future__ import annotations

import weakref

import numpy as np

from ...schedule import report_race
from ..dma import Region
from .errors import WarpgroupRaceError


# What the signals into a semaphore carried, by its buffer (every element together: a waiter
# learns at least what the signal it consumed carried). Mosaic GPU's semaphore_signal is a
# release and semaphore_wait an acquire (primitives.py: memory_scope; red.release / ld.acquire),
# the same buffer on every device of a shard_map (peer buffers), so they are kept by buffer:
# id -> (weak reference to the buffer, clock).
_SEMAPHORE_CLOCKS: dict = {}


def semaphore_clock(array, create: bool = False) -> "dict | None":
    hit = _SEMAPHORE_CLOCKS.get(id(array))
    if hit is not None and hit[0]() is array:
        return hit[1]
    if not create:
        return None
    if len(_SEMAPHORE_CLOCKS) >= 4096:
        _SEMAPHORE_CLOCKS.clear()
    clock = {}
    _SEMAPHORE_CLOCKS[id(array)] = (weakref.ref(array), clock)
    return clock


def join(into: dict, other: dict) -> None:
    """``into`` becomes the elementwise maximum of two vector clocks (``into`` and ``other``)."""
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
            if self.array.size <= _MASK_LIMIT:
                return _mask_relation(self._mask(), other._mask(), _OVERLAPS, _masks_overlap)
            boxes = _boxes(self.index, other.index, self.array.shape)
            if boxes is not None:
                return all(lo < ohi and olo < hi for (lo, hi), (olo, ohi) in zip(*boxes))
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
        if self.array is not other.array:
            return False
        if self.array.size <= _MASK_LIMIT:
            return _mask_relation(self._mask(), other._mask(), _COVERS, _mask_covered)
        boxes = _boxes(self.index, other.index, self.array.shape)
        if boxes is not None:
            return all(olo <= lo and hi <= ohi for (lo, hi), (olo, ohi) in zip(*boxes)
                       if lo < hi) or any(lo >= hi for lo, hi in boxes[0])
        mine, theirs = self.region(), other.region()
        return theirs.lo <= mine.lo and mine.hi <= theirs.hi and bool(
            np.isin(mine.addr, theirs.addr, assume_unique=True).all())


def _box(index, shape):
    """[(start, stop)] per dimension of an index of ints and unit-step slices (a box of the
    buffer), or None for any other index."""
    if type(index) is not tuple:
        return None
    out = []
    for d, size in enumerate(shape):
        ix = index[d] if d < len(index) else slice(0, size, 1)
        if type(ix) is slice:
            if ix.step not in (None, 1):
                return None
            out.append((ix.start, ix.stop))
        elif type(ix) is int or isinstance(ix, np.integer):
            out.append((int(ix), int(ix) + 1))
        else:
            return None
    return out


def _boxes(a, b, shape):
    box_a, box_b = _box(a, shape), _box(b, shape)
    return None if box_a is None or box_b is None else (box_a, box_b)


# Buffers up to this many elements (SMEM, small GMEM) compare footprints by masks over the whole
# buffer; larger ones (GMEM operands a TMA store writes a tile of) by the elements' addresses, so
# no buffer-sized mask is made per view.
_MASK_LIMIT = 1 << 16


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


def check_shared(cluster, run, region, kind) -> None:
    """SMEM written by another warpgroup must be ordered before this access by a barrier
    phase whose arrivals carry that write (a data race otherwise: the value depends on the
    schedule). Writes are remembered per writer, the newest over the older it covers."""
    for footprint, writer, epoch in cluster.writes:
        if writer is not run and run.known.get(id(writer), 0) < epoch and \
                region.overlaps(footprint):
            report_race(run, WarpgroupRaceError(
                f"{run.where()}: {kind} of {region.describe()}, which warpgroup "
                f"{writer.warpgroup} of block {writer.block} wrote with no barrier ordering "
                "the two: the result depends on the schedule"))
            break
    if kind != "read":
        cluster.writes = [w for w in cluster.writes
                          if not (w[1] is run and w[2] == run.epoch and w[0].covered_by(region))]
        cluster.writes.append((region, run, run.epoch))
