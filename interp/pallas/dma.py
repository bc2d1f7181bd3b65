"""The DMA and semaphore model of one pallas_call (TPU semantics, one core at a time).

* ``dma_start`` copies ``src[src_index]`` to ``dst[dst_index]`` and, on completion, adds the copied
  byte count to the destination semaphore (and to the source semaphore for a send).
  Without race detection a DMA completes at its start (as JAX's ``interpret=True`` does).
  With ``detect_races=True`` it stays *in flight* in two halves: its *send* (the source read,
  signalling the source semaphore) and its *receive* (the destination written, signalling the
  destination semaphore). A wait on the source semaphore completes the send only (the data is
  taken then and lands later); a wait on the destination semaphore completes both. Any read of
  a destination not yet written, or write of a source not yet read or of a destination, raises
  :class:`RaceError`, as does a DMA still in flight or a semaphore not back at zero when the
  pallas_call (or the ``run_scoped`` that allocated the semaphore) ends.
* ``dma_wait(sem, ref)`` waits until ``sem`` holds the byte count of ``ref`` and subtracts it.
  In-flight DMAs that signal ``sem`` complete (in start order) until it does. A wait that can
  never be satisfied (no DMA or signal will come: the reference runs one core at a time) raises
  :class:`RaceError` instead of hanging.
* Completion order (spec/spmd.py remote-dma/completion-order): a DMA semaphore counts bytes as
  they arrive, from every DMA signalling it, in no defined order. With ``detect_races=True`` a
  wait that in-flight DMAs on its semaphore hold more bytes than it needs is *ambiguous*: which
  DMAs' data has landed when it returns is undefined. The reference still completes them in
  start order, but until every DMA of that wait has completed (later waits), touching the
  destination (or, for a send, writing the source) of any of them is a
  :class:`DmaCompletionOrderError` naming the kernel, device, semaphore and DMAs.
* ``semaphore_signal`` adds, ``semaphore_wait`` waits for and subtracts, ``semaphore_read`` reads.
* Under ``Options(on_race="record")`` a race goes to ``interp.schedule.report_race`` (recorded)
  and the kernel goes on in the reference's order (spec: pallas_tpu/recorded-race): an access
  takes effect when the kernel makes it, a DMA reads its source when its send completes and
  writes its destination when it completes (its wait, or the end of the kernel or run_scoped for
  one never waited for), a wait several DMAs could satisfy completes them in start order. A wait
  nothing can satisfy and a DMA whose indirect destination names an element twice with different
  values still raise: they have no order to go on in.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import RaceError
from ..schedule import report_race, running, wait_until
from .memory import _selected_coords, _show


class DmaCompletionOrderError(RaceError):
    """A kernel relies on which of several DMAs signalling one semaphore a wait saw complete
    (undefined: spec/spmd.py remote-dma/completion-order)."""


def _addresses(ref, index) -> np.ndarray:
    """Byte addresses of the elements ``ref[index]`` touches (exact, for overlap tests)."""
    arr = ref.array
    shape = np.empty(arr.shape, np.bool_)[index].shape if arr.ndim else ()
    coords = _selected_coords(arr.shape, index, np.ones(shape, bool)) if arr.ndim else ()
    addr = np.full(math.prod(shape), arr.__array_interface__["data"][0],
                   dtype=np.int64)
    for c, stride in zip(coords, arr.strides):
        addr += np.asarray(c, np.int64) * stride
    return addr


class Region:
    """A set of elements of one buffer (ref, normalized index) for overlap tests.

    The byte-address interval is computed from the index alone (cheap, the common disjoint case
    ends there); the exact element addresses are only enumerated when two intervals meet.
    """
    __slots__ = ("ref", "index", "lo", "hi", "_addr")

    def __init__(self, ref, index):
        self.ref = ref
        self.index = index
        self._addr = None
        arr = ref.array
        span = _remembered(_SPANS, index, (arr.shape, arr.strides, arr.dtype.itemsize), _span)
        if span is None:
            self.lo = self.hi = 0   # no element
        else:
            base = _base_address(ref)
            self.lo, self.hi = base + span[0], base + span[1]

    @property
    def addr(self) -> np.ndarray:
        if self._addr is None:
            self._addr = np.unique(_addresses(self.ref, self.index))
        return self._addr

    def overlaps(self, other: "Region") -> bool:
        if self.hi <= other.lo or other.hi <= self.lo or self.lo == self.hi or other.lo == other.hi:
            return False
        if self.ref.array.dtype.itemsize != other.ref.array.dtype.itemsize:
            return True  # bitcast views: conservative, the byte ranges interleave
        return np.intersect1d(self.addr, other.addr, assume_unique=True).size > 0

    def describe(self) -> str:
        return f"{self.ref.short()}{_show(self.index)}"


def _span(index, shape, strides, itemsize) -> "tuple | None":
    """(first, end) byte offsets from a buffer's first element of the elements ``index`` names
    (a superset interval), or None when it names none."""
    lo = hi = 0
    nix = len(index)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        ix = index[d] if d < nix else slice(0, size, 1)   # unindexed trailing dims: whole
        if type(ix) is slice:
            step = ix.step or 1
            n = max(0, -(-(ix.stop - ix.start) // step))
            if n == 0:
                return None
            first, last = ix.start, ix.start + (n - 1) * step
        elif isinstance(ix, (int, np.integer)):
            first = last = int(ix)
        else:
            a = np.asarray(ix)
            if a.size == 0:
                return None
            first, last = int(a.min()), int(a.max())
        lo += min(first * stride, last * stride)
        hi += max(first * stride, last * stride)
    return lo, hi + itemsize


# Values derived from a normalized index and its buffer's geometry, remembered per index object
# (the state and DMA rules hand one tuple per distinct index): race checks run per access and
# per DMA while DMAs are in flight. Only tuples of ints and slices (immutable) are remembered;
# an entry holds its tuple, so the id cannot be reused while the entry exists.
_SPANS: dict = {}
_SEM_POSITIONS: dict = {}
MAX_REMEMBERED = 1 << 12


def _remembered(memo, index, geometry, compute):
    key = (id(index), geometry)
    hit = memo.get(key)
    if hit is not None and hit[0] is index:
        return hit[1]
    value = compute(index, *geometry)
    if type(index) is tuple and all(type(ix) is slice or type(ix) is int for ix in index):
        if len(memo) >= MAX_REMEMBERED:
            memo.clear()
        memo[key] = (index, value)
    return value


def _shape(ref, index) -> tuple:
    from .memory import _index_shape
    return _index_shape(ref.array.shape, index)


def view_bytes(ref, index) -> int:
    """The byte count of ``ref[index]``: what a DMA of it moves and its semaphores count."""
    return math.prod(_shape(ref, index)) * ref.array.dtype.itemsize


def _indirect(index) -> bool:
    """Whether a normalized index holds index arrays (an indirect / scatter-gather DMA)."""
    for ix in index:   # (a loop: called per DMA, cheaper than any() over a generator)
        if isinstance(ix, np.ndarray) and ix.ndim:
            return True
    return False


class Dma:
    __slots__ = ("src", "dst", "dst_sem", "src_sem", "add", "nbytes", "point", "done", "sent",
                 "taken", "origin", "waits")

    def __init__(self, src, dst, dst_sem, src_sem, add, nbytes, point, origin=""):
        self.src, self.dst, self.dst_sem, self.src_sem = src, dst, dst_sem, src_sem
        self.add, self.nbytes, self.point, self.done = add, nbytes, point, False
        self.sent = False      # its source has been read (a wait on its send semaphore)
        self.taken = None      # (value, written) read from the source at the send
        self.origin = origin   # the kernel (and device) that started it, for messages
        self.waits: list = []  # the ambiguous waits (AmbiguousWait) it is one of

    def describe(self) -> str:
        return (f"DMA from {self.src.describe()} to {self.dst.describe()} (started by "
                f"'{self.origin}' at grid point {self.point})")


class AmbiguousWait:
    """A wait on a semaphore that several in-flight DMAs signal with more bytes than it needs:
    which of them have completed when it returns is undefined. ``parts`` are (dma, receive):
    receive True when the wait counts the DMA's destination side, False its send side."""
    __slots__ = ("where", "semaphore", "amount", "parts")

    def __init__(self, where, semaphore, amount, parts):
        self.where, self.semaphore, self.amount, self.parts = where, semaphore, amount, parts

    def settled(self) -> bool:
        return all(dma.done if receive else dma.sent for dma, receive in self.parts)

    def message(self, what: str) -> str:
        dmas = "; ".join(f"{k + 1}: " + ("" if receive else "send of the ") + dma.describe()
                         for k, (dma, receive) in enumerate(self.parts))
        return (f"{what}, after {self.where}: its wait on {self.semaphore} for {self.amount} "
                f"bytes could be satisfied by several DMAs in flight ({dmas}), and which of them "
                "completed is undefined (DMA semaphores count bytes from every DMA signalling "
                "them, in no defined order): wait for all of them first, or give each DMA its "
                "own semaphore")


def _base_address(ref) -> int:
    address = getattr(ref, "address", None)   # KernelRef caches it per array
    return address() if address is not None else ref.array.__array_interface__["data"][0]


def _sem_key(sem):
    """(buffer, flat element positions) of a semaphore operand, whatever the index's form."""
    ref, index = sem
    return id(ref), _remembered(_SEM_POSITIONS, index, (ref.array.shape,), _sem_positions)


def _sem_positions(index, shape) -> tuple:
    if len(index) == len(shape) and all(isinstance(i, (int, np.integer)) for i in index):
        return (int(np.ravel_multi_index(index, shape)) if shape else 0,)
    return tuple(int(i) for i in np.ravel(np.arange(math.prod(shape)).reshape(shape)[index]))


class DmaEngine:
    """DMAs and semaphores of one pallas_call. ``detect`` enables in-flight tracking."""

    def __init__(self, run, detect: bool):
        self.run = run
        self.detect = detect
        self.inflight: list[Dma] = []
        self.unsettled: list[AmbiguousWait] = []   # ambiguous waits not all of whose DMAs completed

    # -- DMAs ---------------------------------------------------------------------------------
    def check(self, src, src_index, dst, dst_index) -> int:
        """The checks of a DMA's operands (bounds, equal shapes); returns the byte count. They
        depend only on the indices and the buffers' shapes: callers that saw them pass for the
        same (indices, shapes) may pass the byte count to ``start`` instead."""
        src.check_index(src_index)
        dst.check_index(dst_index)
        sshape = _shape(src, src_index)
        dshape = _shape(dst, dst_index)
        if sshape != dshape:
            raise RaceError(f"{self.run.where()}: DMA from {src.short()}{_show(src_index)} "
                            f"{list(sshape)} to {dst.short()}{_show(dst_index)} "
                            f"{list(dshape)}: shapes differ")
        return view_bytes(src, src_index)

    def start(self, src, src_index, dst, dst_index, dst_sem, src_sem, add: bool,
              nbytes: "int | None" = None) -> None:
        if nbytes is None:
            nbytes = self.check(src, src_index, dst, dst_index)
        if self.run.pending is not None:
            self.run.raise_pending()
        self.run.dma_started(src, src_index, dst, dst_index,
                             [sem for sem in (dst_sem, src_sem) if sem is not None])
        if not self.detect:
            self._transfer(src, src_index, dst, dst_index, add)
            self._signal_completion(dst_sem, src_sem, nbytes)
            return
        dma = Dma(Region(src, src_index), Region(dst, dst_index), dst_sem, src_sem, add, nbytes,
                  self.run.point, self.run.label)
        if self.unsettled:
            self._check_unsettled(dma.src, "DMA from", write=False)
            self._check_unsettled(dma.dst, "DMA into", write=True)
        for other in self.inflight:
            if dma.dst.overlaps(other.dst) or (not other.sent and dma.dst.overlaps(other.src)):
                report_race(self.run, RaceError(
                    f"{self.run.where()}: DMA into {dma.dst.describe()} overlaps the DMA in "
                    f"flight from {other.src.describe()} to {other.dst.describe()} (started at "
                    f"grid point {other.point})"))
            elif dma.src.overlaps(other.dst):
                report_race(self.run, RaceError(
                    f"{self.run.where()}: DMA from {dma.src.describe()} reads the destination "
                    f"of the DMA in flight into {other.dst.describe()} (started at grid point "
                    f"{other.point})"))
        self.inflight.append(dma)

    def _transfer(self, src, src_index, dst, dst_index, add, taken=None) -> None:
        """The copy itself (of ``taken``, the source's (value, written) read at the send, when
        the send completed earlier). Never-written source elements stay never-written in the
        destination (a DMA moves memory; only a later read of it is an uninitialized read)."""
        if taken is None and not add and src.init is None and dst.init is None \
                and not _indirect(dst_index):
            # The common copy: one assignment (NumPy copies the source first where the two
            # overlap, so this equals copying out, then in).
            dst.array[dst_index] = src.array[src_index]
            return
        value, written = self._take(src, src_index) if taken is None else taken
        dup = self._duplicates(dst, dst_index, value, add)
        if add:
            if dst.init is not None:
                dst._check_init(dst_index)
            if written is not None and not written.all():
                src._check_init(src_index)
            if dup:  # integer scatter-add: every duplicate receives its addition (wrapping)
                np.add.at(dst.array, dst_index, value)
            else:
                dst.array[dst_index] = dst.array[dst_index] + value
            return
        dst.array[dst_index] = value
        if dst.init is not None:
            dst.init[dst_index] = True if written is None else written

    @staticmethod
    def _take(src, src_index):
        """What a DMA reads from its source: (value, written elements or None)."""
        return (np.array(src.array[src_index], copy=True),
                None if src.init is None else np.array(src.init[src_index], copy=True))

    def _duplicates(self, dst, dst_index, value, add) -> bool:
        """An indirect (scatter) destination that names an element twice: the DMA engine writes
        its elements in no defined order, so the result is defined only when every write to
        the element carries the same bits (and, for an accumulating DMA, when the additions
        are exact in any order: integers). Anything else raises RaceError."""
        if not _indirect(dst_index):
            return False
        shape = value.shape
        coords = _selected_coords(dst.array.shape, dst_index, np.ones(shape, bool))
        flat = np.ravel_multi_index(coords, dst.array.shape).reshape(shape)
        order = np.argsort(flat, axis=None, kind="stable")
        sflat = flat.ravel()[order]
        same = sflat[1:] == sflat[:-1]
        if not same.any():
            return False
        from .. import dtypes
        at = tuple(int(i) for i in np.unravel_index(int(sflat[1:][same][0]), dst.array.shape))
        where = f"{dst.short()} element {at}"
        if add:
            if dtypes.is_float(dst.array.dtype) or dtypes.is_complex(dst.array.dtype):
                raise RaceError(f"{self.run.where()}: accumulating DMA into {where} twice: the "
                                "order of the float additions is undefined")
            return True
        bits = value.reshape(-1).view(np.uint8).reshape(value.size, -1)[order]
        if not (bits[1:][same] == bits[:-1][same]).all():
            raise RaceError(f"{self.run.where()}: indirect DMA writes different values to "
                            f"{where}: which write lands last is undefined")
        return False

    def _signal_completion(self, dst_sem, src_sem, nbytes) -> None:
        if dst_sem is not None:
            self._add(dst_sem, nbytes)
        if src_sem is not None:
            self._add(src_sem, nbytes)

    def _complete_send(self, dma: Dma) -> None:
        """The send half: the source is read (it may be reused), the data lands later."""
        dma.taken = self._take(dma.src.ref, dma.src.index)
        dma.sent = True
        if dma.src_sem is not None:
            self._add(dma.src_sem, dma.nbytes)

    def _complete(self, dma: Dma) -> None:
        if not dma.sent:
            self._complete_send(dma)
        self.inflight.remove(dma)
        src, dst = dma.src, dma.dst
        self._transfer(src.ref, src.index, dst.ref, dst.index, dma.add, dma.taken)
        dma.taken = None
        dma.done = True
        if dma.dst_sem is not None:
            self._add(dma.dst_sem, dma.nbytes)

    def wait_dma(self, sem, ref, index, *, send: bool, nbytes: "int | None" = None) -> None:
        """dma_wait: wait until ``sem`` holds the byte count of ``ref[index]``, then subtract it."""
        if nbytes is None:
            nbytes = view_bytes(ref, index)
        self._wait(sem, nbytes, kind="dma_wait (send)" if send else "dma_wait", send=send)
        self.run.waited(sem[0])

    # -- semaphores ---------------------------------------------------------------------------
    def _add(self, sem, amount) -> None:
        ref, index = sem
        ref.array[index] = ref.array[index] + amount

    def signal(self, sem, amount) -> None:
        amount = int(amount)
        self.run.signalled(sem[0])
        self._add(sem, amount)

    def read_sem(self, sem):
        ref, index = sem
        return ref.array[index]

    def wait(self, sem, amount, decrement=True) -> None:
        self._wait(sem, int(amount), kind="semaphore_wait", send=None, decrement=decrement)
        self.run.waited(sem[0])

    @staticmethod
    def _signals(dma, key, send) -> "bool | None":
        """Whether completing ``dma`` signals the semaphore ``key`` (its send semaphore for a
        wait_send, its receive one for a dma_wait, either for a semaphore_wait): True for its
        receive side, False for its send side (not yet done), None when it does not."""
        if send is not True and dma.dst_sem is not None and _sem_key(dma.dst_sem) == key:
            return True
        if send is not False and not dma.sent and dma.src_sem is not None \
                and _sem_key(dma.src_sem) == key:
            return False
        return None

    def signalling(self, sem, send) -> bool:
        """Whether a DMA in flight would signal ``sem`` on completion."""
        if not self.inflight:
            return False
        key = _sem_key(sem)
        return any(self._signals(dma, key, send) is not None for dma in self.inflight)

    def complete_signalling(self, sem, amount, send) -> None:
        """Complete in-flight DMAs that signal ``sem`` (in start order) until it holds
        ``amount``; a wait they could satisfy in several ways is remembered (AmbiguousWait)."""
        ref, index = sem
        key = _sem_key(sem)
        parts = [(dma, receive) for dma in self.inflight
                 for receive in (self._signals(dma, key, send),) if receive is not None]
        deficit = amount - int(ref.array[index])
        if deficit <= 0 or not parts:
            return
        if len(parts) > 1 and sum(dma.nbytes for dma, _ in parts) > deficit:
            wait = AmbiguousWait(f"{self.run.where()}", f"{ref.short()}{_show(index)}", amount,
                                 parts)
            for dma, _ in parts:
                dma.waits.append(wait)
            self.unsettled.append(wait)
        for dma, receive in parts:
            if int(ref.array[index]) >= amount:
                break
            if receive:
                self._complete(dma)
            else:
                self._complete_send(dma)
        if self.unsettled:
            self.unsettled[:] = [w for w in self.unsettled if not w.settled()]

    def _wait(self, sem, amount, *, kind, send, decrement=True) -> None:
        ref, index = sem
        if self.detect and self.inflight:
            self.complete_signalling(sem, amount, send)
        have = int(ref.array[index])
        mesh = self.run.mesh
        devices = self.run.devices
        if have < amount and devices is not None:
            # Kernels on other devices may signal it (interp.pallas.devices).
            have = devices.wait(self, sem, amount, kind, send)
        elif have < amount and mesh is not None and running() is not None:
            # Other cores may signal it: let them run until it is ready (or all are stuck).
            wait_until(lambda: int(ref.array[index]) >= amount,
                       f"{kind} on {ref.short()}{_show(index)} for {amount}", RaceError)
            have = int(ref.array[index])
        if have < amount:
            raise RaceError(
                f"{self.run.where()}: {kind} on {ref.short()}{_show(index)} needs {amount} but "
                f"the semaphore holds {have} and nothing in flight will signal it (a deadlock on "
                "hardware; the reference runs one core at a time)")
        if decrement:
            ref.array[index] = have - amount
        if devices is not None:
            devices.waited(self.run, ref)

    # -- exit checks ---------------------------------------------------------------------------
    def check_exit(self, sems=(), what="pallas_call") -> None:
        """At the end of a kernel (or of a run_scoped): nothing in flight, semaphores at zero."""
        if not self.detect:
            return
        ids = {id(r) for r in sems}
        for dma in list(self.inflight):
            if what == "pallas_call" or id(dma.dst_sem[0] if dma.dst_sem else None) in ids:
                report_race(self.run, RaceError(
                    f"{self.run.where()}: DMA from {dma.src.describe()} to {dma.dst.describe()} "
                    f"(started at grid point {dma.point}) was never waited for before the end "
                    f"of the {what}"))
                self._complete(dma)   # (recorded: it lands now, before the buffers go)
        for ref in sems:
            left = ref.array != 0
            if left.any():   # (np.argwhere finds nothing in a 0-d array: a scalar semaphore)
                at = tuple(int(i) for i in np.argwhere(left)[0]) if left.ndim else ()
                report_race(self.run, RaceError(
                    f"{self.run.where()}: semaphore {ref.short()} holds {int(ref.array[at])} at "
                    f"index {at} at the end of the {what} (signals and waits do not balance)"))

    # -- race checks on kernel accesses --------------------------------------------------------
    def _check_unsettled(self, region, what, write: bool) -> None:
        """A DMA or access touching data an ambiguous wait leaves undefined: the destination of
        any of its DMAs (or, for a write, the source of a DMA whose send it counted)."""
        for wait in list(self.unsettled):
            for k, (dma, receive) in enumerate(wait.parts):
                side = dma.dst if receive else dma.src if write else None
                if side is not None and region.overlaps(side):
                    report_race(self.run, DmaCompletionOrderError(wait.message(
                        f"{self.run.where()}: {what} {region.describe()} touches the "
                        f"{'destination' if receive else 'source'} of DMA {k + 1}")))
                    # (recorded: the start-order completion stands, reported once per wait)
                    self.unsettled.remove(wait)
                    break

    def check_access(self, ref, index, kind: str) -> None:
        if not self.detect or not (self.inflight or self.unsettled):
            return
        region = Region(ref, index)
        if self.unsettled:
            self._check_unsettled(region, f"{kind} of", write=kind != "read")
        for dma in self.inflight:
            hit = None
            if region.overlaps(dma.dst):
                hit = "destination"
            elif kind != "read" and not dma.sent and region.overlaps(dma.src):
                hit = "source"
            if hit:
                report_race(self.run, RaceError(
                    f"{self.run.where()}: {kind} of {region.describe()} while a DMA from "
                    f"{dma.src.describe()} to {dma.dst.describe()} (started at grid point "
                    f"{dma.point}) is in flight: it touches the DMA's {hit} before dma_wait"))
