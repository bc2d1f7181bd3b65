"""What orders the accesses of a Mosaic GPU kernel's threads: vector clocks over warpgroups and
barrier phases, the footprints of accesses and asynchronous operations, the SMEM race between
warpgroups and the GMEM race between clusters.

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
from .errors import ClusterRaceError, WarpgroupRaceError


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


# -- GMEM shared by the clusters of a launch ------------------------------------------------------
# Clusters order each other only through GMEM semaphores (a signal releases what its thread knows,
# a wait acquires it: WarpgroupRun.signalled / waited), so an access of GMEM another cluster
# accessed, one of the two a write, must know that cluster's access through a chain of them
# (spec: mosaic_gpu/gmem-race-between-clusters). A launch of several clusters records every GMEM
# access of its threads per buffer, each by its box (per dimension [lo, hi) from the index), one
# record per (box, thread, kind) holding the thread's newest epoch (its later access of the same
# box is ordered after the earlier one: a thread that knows the later knows both). Reads and writes
# are kept apart, so reading a buffer nobody writes (a kernel's inputs) costs a record and no
# search; an access is compared with the records whose boxes meet its own (vectorised over the
# buffer's boxes), the exact footprints deciding where a box is only a bound.

READ, WRITE, ATOMIC = "read", "write", "atomic"
_UNBOUNDED = 1 << 62


class ClusterAccesses:
    """The GMEM accesses of one launch's clusters, by buffer (the array owning the memory)."""
    __slots__ = ("buffers",)

    def __init__(self):
        self.buffers = {}   # id(owning array) -> (its reads, its writes and atomic updates)

    def check(self, run, region: Footprint, kind: str, atomic: bool) -> None:
        """An access of GMEM by ``run``: ``kind`` as check_access has it, ``atomic`` for an
        element-wise atomic update (a TMA reduction store: cp.reduce.async.bulk, PTX ISA
        9.7.9.25.4.2), which does not race with another atomic update. Raised (or recorded:
        ``found``) when it meets an access of another cluster not ordered before it; then
        recorded."""
        array = region.array
        owner = array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        access = ATOMIC if atomic else READ if kind == "read" else WRITE
        buffers = self.buffers.get(id(owner))
        if buffers is None or buffers[2] is not owner:
            buffers = self.buffers[id(owner)] = (_Boxes(owner.ndim), _Boxes(owner.ndim), owner)
        reads, writes, _ = buffers
        box = _box(region.index, array.shape) if owner is array else None
        exact = box is not None
        if not exact:
            box = _bounds(region.index, array.shape) if owner is array else None
        racing = _unordered(run, region, box, exact, access,
                            (writes,) if access == READ else (writes, reads))
        if racing is not None:
            report_race(run, ClusterRaceError(_message(run, region, kind, *racing)))
        (reads if access == READ else writes).add(box, exact, region, run, access)


def _unordered(run, region, box, exact, access, searched):
    """(footprint, thread, access) of the first record of ``searched`` an access of ``run`` to
    ``region`` races with: another cluster's, not known to ``run``, overlapping, not both atomic
    updates and not both reads (reads are searched only by writes)."""
    known, cluster = run.known, run.cluster
    for records in searched:
        for footprint, other, epoch, other_access, other_exact in records.meeting(box):
            if other.cluster is cluster or known.get(id(other), 0) >= epoch or \
                    (access == ATOMIC and other_access == ATOMIC):
                continue
            if (exact and other_exact) or region.overlaps(footprint):
                return footprint, other, other_access
    return None


def _message(run, region, kind, footprint, other, other_access) -> str:
    what = {READ: "read", WRITE: "wrote", ATOMIC: "updated atomically (a TMA reduction store)"}
    return (f"mosaic_gpu/gmem-race-between-clusters: {run.where()}: {run.async_proxy or kind} of "
            f"{region.describe()}, which {other.where()} {what[other_access]} "
            f"({footprint.describe()}) with no semaphore ordering the two: clusters "
            f"{other.cluster.point} and {run.cluster.point} run concurrently in any order, so the "
            "result depends on the schedule")


def _bounds(index, shape) -> list:
    """[(lo, hi)] per dimension bounding the elements an index names (any index: a superset)."""
    out = []
    for d, size in enumerate(shape):
        ix = index[d] if type(index) is tuple and d < len(index) else slice(0, size, 1)
        if type(ix) is slice:
            first, last = ix.start or 0, (size if ix.stop is None else ix.stop) - 1
            if ix.step is not None and ix.step < 0:
                first, last = last + 1, first
            out.append((min(first, last), max(first, last) + 1))
        elif isinstance(ix, (int, np.integer)):
            out.append((int(ix), int(ix) + 1))
        else:
            a = np.asarray(ix)
            out.append((int(a.min()), int(a.max()) + 1) if a.size else (0, 0))
    return out


class _Boxes:
    """Access records of one buffer: [Footprint, thread, epoch, access, exact box?], and their
    boxes as arrays for a vectorised search. A record's box bounds its footprint (exactly when
    ``exact``); a view of another array's memory has no box (it meets every box)."""
    __slots__ = ("records", "lo", "hi", "latest")

    def __init__(self, ndim):
        self.records = []
        self.lo = np.empty((8, ndim), np.int64)
        self.hi = np.empty((8, ndim), np.int64)
        self.latest = {}   # (box, thread id, access) -> its record (exact boxes only)

    def add(self, box, exact, region, run, access) -> None:
        key = (tuple(box), id(run), access) if exact else None
        record = self.latest.get(key) if exact else None
        if record is not None:
            record[0], record[2] = region, run.epoch
            return
        n = len(self.records)
        if n == len(self.lo):
            self.lo = np.concatenate([self.lo, np.empty_like(self.lo)])
            self.hi = np.concatenate([self.hi, np.empty_like(self.hi)])
        if box is None:
            self.lo[n], self.hi[n] = -_UNBOUNDED, _UNBOUNDED
        else:
            self.lo[n] = [lo for lo, _ in box]
            self.hi[n] = [hi for _, hi in box]
        record = [region, run, run.epoch, access, exact]
        self.records.append(record)
        if exact:
            self.latest[key] = record

    def meeting(self, box) -> list:
        """The records whose boxes meet ``box`` (None: every record)."""
        n = len(self.records)
        if box is None or n == 0:
            return self.records
        lo = np.array([b[0] for b in box], np.int64)
        hi = np.array([b[1] for b in box], np.int64)
        hits = ((self.lo[:n] < hi) & (lo < self.hi[:n])).all(axis=1)
        return [self.records[i] for i in np.flatnonzero(hits)]
