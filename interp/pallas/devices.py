"""Pallas kernels across the interpreted devices of a ``shard_map`` (TPU kernels and core meshes,
Mosaic GPU launches): remote DMAs, semaphores signalled on another device and the barrier
semaphore (semantics: spec/spmd.py, "remote DMA"). Dialect-free: what differs by dialect is a
method of the kernel's run (``KernelRun.peer_buffer``).

A ``pallas_call`` inside a shard_map body runs once per interpreted device (``interp/spmd.py``:
one thread per device, one device at a time, the baton passing when a device waits). The runs of
one kernel on all the devices (and all their cores) form a :class:`DeviceKernels`:

* Every device's kernel allocates its buffers, then the devices meet (a rendezvous of all the
  devices of the shard_map), so a remote DMA or signal never names a buffer that does not exist
  yet; at the end of the kernel they meet again before any device reads its outputs. JAX's TPU
  interpret mode does the same: ``_barrier`` after allocating and ``_clean_up_shared_memory``
  before freeing (jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py).
* ``device_id`` names the target device: a MESH id is the device's coordinates along the mesh
  axes (a tuple in mesh order, or a dict {axis: index} whose unnamed axes keep this device's
  coordinate; a tuple of axes as a key is the row-major index over them), a LOGICAL id the
  row-major index over all the mesh axes (interpret/utils.py ``device_coords_to_logical_id``).
  An id outside the mesh raises :class:`OutOfBoundsError`.
* The buffer a remote DMA writes (and the semaphore it or a remote signal increments) is the
  target kernel's buffer in the same position: the same operand, scratch buffer, run_scoped
  allocation (while the target is inside that run_scoped) or the barrier semaphore (JAX's
  interpret mode: the same buffer id on the other device).
* DMAs in flight (``detect_races=True``) are one list for all the devices: a read of a remote
  DMA's destination on the target device before its ``dma_wait`` is a race like any other, and a
  wait completes the in-flight DMAs, from any device, that signal its semaphore; a wait several
  of them could satisfy is remembered for every device (interp.pallas.dma: completion order).
* A kernel that sets ``collective_id`` brings its own barrier: Mosaic inserts no device barrier at
  its start and JAX's interpret mode skips its global one (interpret_pallas_call.py: "The kernel
  doesn't specify its own barrier semaphore, so we do a global barrier"). With
  ``detect_races=True`` a remote DMA or signal (other than to the barrier semaphore) into a device
  this device has not heard from (no semaphore it has waited on was signalled from there) raises
  RaceError: the target's kernel may not have started.
* A ``pl.kernel`` / ``core_map`` over a TPU core mesh joins like a pallas_call
  (:func:`join_core_mesh`), every core of every device a *member* (device, core): the devices
  meet once before a device's cores start and once after all of them ended; the cores run forked
  into the devices' schedule (``interp.schedule.run_cores``). A remote DMA or signal names the
  device by device_id's mesh axes and the core by a core axis of a MESH dict or core_index
  (:meth:`DeviceKernels.address`; spec/spmd.py remote-dma/core-target).
* A wait on a semaphore only another device (or core) can signal lets the others run
  (``interp.schedule.wait_until``: the running core waits); when every device waits, the
  program would hang on hardware: the reference raises ``interp.spmd.DeadlockError`` naming each
  device (and core) and the semaphore it waits on.
* Mosaic GPU launches (``interp/pallas/mosaic_gpu/launch.py`` Launch) join as one run per device; their
  warpgroups find a peer's buffer by what it is (``peer_buffer``: the same operand or launch
  semaphore), not by position. Under detect_races, accesses to device buffers from several
  devices are checked by :class:`DeviceAccesses` (release/acquire through semaphores).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import OutOfBoundsError, RaceError, UnsupportedPrimitiveError
from ..schedule import current_device, report_race, wait_until
from .dma import Region
from .memory import KernelRef, _show


def barrier_semaphore(run) -> KernelRef:
    """The kernel's barrier semaphore (``get_barrier_semaphore``), allocated at its first use."""
    if run.barrier is None:
        run.barrier = KernelRef(np.zeros((), np.int64), "barrier semaphore", run,
                                kind="semaphore", check_bounds=run.options.check_bounds)
        if run.mesh is not None:
            run.mesh.barriers[run.core] = run.barrier
    return run.barrier


class DeviceKernels:
    """The runs of one kernel on every device of its shard_map, by logical device id, and on
    every core of each device (a core-mesh kernel of several cores): its *members*, keyed
    ``(logical id, core)`` (core: the run's point in the core mesh; a pallas_call's or Mosaic GPU
    launch's single run has core None)."""

    def __init__(self, world, entries, custom_barrier: bool):
        self.world = world
        self.custom_barrier = custom_barrier   # collective_id set: no implicit start barrier
        self.devices = [device for device, _ in entries]
        self.cores = [list(members) for _, members in entries]   # per device: its cores, in order
        self.members = {(rank, core): run for rank, (_, members) in enumerate(entries)
                        for core, (run, _) in members.items()}
        self.slots = {(rank, core): {id(r): i for i, r in enumerate(refs)}
                      for rank, (_, members) in enumerate(entries)
                      for core, (_, refs) in members.items()}
        self.buffers = {(rank, core): list(refs) for rank, (_, members) in enumerate(entries)
                        for core, (_, refs) in members.items()}
        self.name = next(iter(self.members.values())).name   # the kernel's
        self.inflight: list = []   # DMAs in flight on all the devices (detect_races)
        self.unsettled: list = []  # ambiguous waits (interp.pallas.dma.AmbiguousWait), all devices
        self.ended: set = set()    # members whose kernel body has ended
        self.heard = {key: set() for key in self.members}   # per member: members known to run
        self.signallers: dict = {}              # id(semaphore buffer) -> members that signalled it
        # device buffers touched across devices
        self.accesses = DeviceAccesses(len(entries), lambda i: self.devices[i].describe())
        # run_scoped allocations by occurrence (a signal may land before its target enters one):
        self.entered: dict = {}    # (member, id(prototypes)) -> occurrences entered so far
        self.scoped: dict = {}     # id(ref inside a run_scoped) -> (id(prototypes), occurrence,
        #                            position, prototypes)
        self.early: dict = {}      # (member, id(prototypes), occurrence) -> its allocations,
        #                            made by a signal before the member entered that run_scoped

    # -- members (device, core) ------------------------------------------------------------------
    def member(self, run) -> tuple:
        """The (logical id, core) ``run`` is (a device's only run, whatever its ``core``: the
        warpgroups of a Mosaic GPU launch act for the launch)."""
        cores = self.cores[run.device_rank]
        return run.device_rank, (run.core if len(cores) > 1 else cores[0])

    def of_core_mesh(self, run) -> bool:
        """Whether ``run`` is a core of a TPU core-mesh kernel (its members name cores)."""
        return self.cores[run.device_rank][0] is not None

    def _key(self, run, target) -> tuple:
        """A target given as a logical id (the same core there) or as (logical id, core)."""
        if isinstance(target, tuple):
            return target
        cores = self.cores[target]
        return target, (self.member(run)[1] if len(cores) > 1 else cores[0])

    def describe(self, key) -> str:
        """The device, and the core when its kernel has several (messages)."""
        rank, core = key
        text = self.devices[rank].describe()
        if len(self.cores[rank]) > 1:
            run = self.members[key]
            text += f" core {dict(zip(run.mesh.axes, core))}"
        return text

    def address(self, run, device_id, device_id_type, what: str, core_index=None,
                same_core: bool = True) -> tuple:
        """The member (logical id, core) a remote DMA or signal names. ``device_id``'s mesh axes
        name the device (:meth:`target`); the core is the core axis of a MESH dict (Mosaic's
        lowering.py ``_device_id_to_logical``: the dict's non-mesh axes that are core axes),
        or ``core_index`` (semaphore_signal), or, when neither names one, the sender's own core
        for a DMA (``same_core``; interpret_pallas_call.py dma_start: "Same core on destination
        device as on source"). A signal naming no core from a kernel of several cores is
        refused: Mosaic passes no core id and JAX's interpret mode then signals core 0
        (interpret_pallas_call.py semaphore_signal) while its DMAs keep the sender's core."""
        mesh = run.mesh
        core_axes = {}
        if isinstance(device_id, dict) and mesh is not None:
            core_axes = {k: v for k, v in device_id.items() if k in mesh.axes}
            device_id = {k: v for k, v in device_id.items() if k not in mesh.axes}
            if core_axes and getattr(device_id_type, "name", "MESH") != "MESH":
                raise UnsupportedPrimitiveError(what, {"device_id_type": device_id_type},
                                                "a dict device_id needs DeviceIdType.MESH")
        if core_axes and core_index is not None:
            raise UnsupportedPrimitiveError(
                what, {"device_id": core_axes, "core_index": core_index},
                "both core_index and a core axis in device_id (Mosaic: 'Cannot specify both')")
        rank = run.device_rank if device_id is None or (isinstance(device_id, dict) and
                                                        not device_id) else \
            self.target(run, device_id, device_id_type, what)
        cores = self.cores[rank]
        if mesh is None:   # a pallas_call: no cores to name
            if core_index is not None:
                raise UnsupportedPrimitiveError(what, {"core_index": core_index},
                                                "core_index outside a core-mesh kernel")
            return rank, cores[0]
        point = dict(zip(mesh.axes, run.core))
        if core_index is not None:
            core_axes = {mesh.axes[0]: core_index}
        elif not core_axes and not same_core and len(cores) > 1:
            raise UnsupportedPrimitiveError(
                what, {"device_id": device_id},
                f"{run.where()}: a signal to another device from a kernel of {len(cores)} cores "
                "must name the core (core_index, or the core axis in device_id): Mosaic passes no "
                "core id and JAX's interpret mode then signals core 0, while a DMA goes to the "
                "sender's core")
        for axis, value in core_axes.items():
            value = int(np.asarray(value))
            size = mesh.sizes[mesh.axes.index(axis)]
            if not 0 <= value < size:
                raise OutOfBoundsError(f"{run.where()}: {what} to core {value} outside [0, "
                                       f"{size}) along the core axis {axis!r}")
            point[axis] = value
        return rank, tuple(point[a] for a in mesh.axes)

    # -- device ids ----------------------------------------------------------------------------
    def target(self, run, device_id, device_id_type, what: str) -> int:
        """The logical id of the device ``device_id`` names, from ``run``'s device."""
        device = self.devices[run.device_rank]
        names, sizes = tuple(device.coords), tuple(device.sizes[n] for n in device.coords)
        # No device_id_type (Mosaic GPU's semaphore_signal and remote refs): mesh coordinates
        # (mosaic_gpu/primitives.py lowers them with DeviceIdType.MESH).
        kind = "MESH" if device_id_type is None else \
            getattr(device_id_type, "name", str(device_id_type)).upper()
        if isinstance(device_id, dict):
            if kind != "MESH":
                raise UnsupportedPrimitiveError(what, {"device_id_type": device_id_type},
                                                "a dict device_id needs DeviceIdType.MESH")
            coords = dict(device.coords)
            for key, value in device_id.items():
                axes = key if isinstance(key, tuple) else (key,)
                unknown = [a for a in axes if a not in coords]
                if unknown:
                    raise UnsupportedPrimitiveError(
                        what, {"device_id": device_id},
                        f"axes {unknown} are not manual axes of the enclosing shard_map "
                        f"{names} (core axes of a core mesh are not devices)")
                linear = int(value)
                span = math.prod(device.sizes[a] for a in axes)
                self._in_range(run, what, device_id, linear, span, f"axes {axes}")
                for a in reversed(axes):
                    linear, coords[a] = divmod(linear, device.sizes[a])
            point = tuple(coords[n] for n in names)
        elif kind == "MESH":
            leaves = device_id if isinstance(device_id, (tuple, list)) else (device_id,)
            point = tuple(int(np.asarray(c)) for c in leaves)
            if len(point) != len(names):
                raise UnsupportedPrimitiveError(
                    what, {"device_id": device_id},
                    f"{len(point)} mesh coordinates for the {len(names)} manual mesh axes {names}")
            for c, n, s in zip(point, names, sizes):
                self._in_range(run, what, device_id, c, s, f"axis {n!r}")
        elif kind == "LOGICAL":
            linear = int(np.asarray(device_id))
            self._in_range(run, what, device_id, linear, math.prod(sizes), "the logical ids")
            return linear
        else:
            raise UnsupportedPrimitiveError(what, {"device_id_type": device_id_type},
                                            "unknown device id type")
        linear = 0
        for c, s in zip(point, sizes):
            linear = linear * s + c
        return linear

    @staticmethod
    def _in_range(run, what, device_id, value, size, along) -> None:
        if not 0 <= value < size:
            raise OutOfBoundsError(f"{run.where()}: {what} to device {device_id!r}: index "
                                   f"{value} outside [0, {size}) along {along} of the mesh")

    # -- buffers of another device -------------------------------------------------------------
    def counterpart(self, run, ref, target, what: str):
        """The buffer of member ``target``'s kernel (a logical id: the same core there, or
        (logical id, core)) in the position ``ref`` has in ``run``."""
        here = self.member(run)
        key = self._key(run, target)
        if key in self.ended and key != here:
            raise RaceError(f"{run.where()}: {what} into {ref.short()} of "
                            f"{self.describe(key)}, whose kernel has ended (its "
                            "outputs may already be read: signal and DMA before the target's "
                            "last wait)")
        if ref is run.barrier:
            other = barrier_semaphore(self.members[key])
            self.signallers.setdefault(id(other), set()).add(here)
            return other
        # (the cores of one device start together: the device allocated all their buffers)
        if (self.custom_barrier and key[0] != here[0] and key not in self.heard[here]
                and run.options.detect_races):
            # (recorded: the target's buffers exist from the start rendezvous on)
            report_race(run, RaceError(
                f"{run.where()}: {what} into {ref.short()} of {self.describe(key)}, "
                f"which this {'core' if len(self.cores[here[0]]) > 1 else 'device'} has not "
                "heard from: the kernel sets collective_id, so no "
                "device barrier precedes it, and its kernel may not have started (signal and "
                "wait on the barrier semaphore first)"))
        # Buffers a kernel finds by what they are rather than by position (Mosaic GPU GMEM:
        # operands and semaphores reserved at launch, KernelRun.peer_buffer).
        other = run.peer_buffer(ref, self.members[key])
        if other is not None:
            if other.kind == "semaphore":
                self.signallers.setdefault(id(other), set()).add(here)
                self.accesses.publish(here[0], id(other))
            return other
        slot = self.slots[here].get(id(ref))
        if slot is None:
            raise UnsupportedPrimitiveError(
                what, {}, f"{run.where()}: {ref.short()} is neither an operand, a scratch buffer "
                "nor a run_scoped allocation of the kernel")
        there = self.buffers[key]
        other = there[slot] if slot < len(there) else None
        if other is None or other.name != ref.name or other.array.shape != ref.array.shape \
                or other.array.dtype != ref.array.dtype:
            other = self._not_entered(ref, key)
        if other is None:
            raise RaceError(f"{run.where()}: {what} into {ref.short()} of "
                            f"{self.describe(key)}, which is not inside the "
                            "run_scoped that allocates it (the buffer does not exist there)")
        if other.kind == "semaphore":
            self.signallers.setdefault(id(other), set()).add(here)
            self.accesses.publish(here[0], id(other))
        return other

    def waited(self, run, ref) -> None:
        """A wait on ``ref`` completed: its signallers' kernels are known to run."""
        here = self.member(run)
        heard = self.signallers.get(id(ref))
        if heard:
            self.heard[here] |= heard
        self.accesses.acquire(here[0], id(ref))

    def enter_scope(self, run, prototypes) -> list:
        """A run_scoped's allocations on ``run``'s device (and core): other devices may address
        them (by position: kernels enter their run_scopeds in program order) until it ends.
        Those a signal made before (:meth:`_not_entered`) are taken over, signals and all."""
        key = self.member(run)
        counted = (key, id(prototypes))
        n = self.entered.get(counted, 0)
        self.entered[counted] = n + 1
        refs = self.early.pop((key, id(prototypes), n), None) or \
            [p.fresh(run) for p in prototypes]
        for i, r in enumerate(refs):
            self.slots[key][id(r)] = len(self.buffers[key])
            self.buffers[key].append(r)
            self.scoped[id(r)] = (id(prototypes), n, i, prototypes)
        return refs

    def exit_scope(self, run, refs) -> None:
        key = self.member(run)
        for r in refs:
            del self.slots[key][id(r)]
            self.scoped.pop(id(r), None)
        if refs:
            del self.buffers[key][-len(refs):]

    def _not_entered(self, ref, key):
        """The semaphore of member ``key`` that ``ref`` (a run_scoped semaphore of the sender)
        is when ``key`` has not yet entered that run_scoped (the same occurrence), made now; None
        for any other buffer, or once ``key`` has left it. Mosaic TPU allocates a run_scoped's
        semaphores in the kernel's frame (mosaic/lowering.py _run_scoped_lowering_rule:
        tpu.sem_alloc in a tpu.region), so a signal lands before the target enters the region
        (JAX's double-barrier pattern, docs/pallas/tpu/distributed.md; semaphore_signal/c3)."""
        scoped = self.scoped.get(id(ref))
        if ref.kind != "semaphore" or scoped is None:
            return None
        pid, n, i, prototypes = scoped
        if self.entered.get((key, pid), 0) > n:
            return None
        refs = self.early.get((key, pid, n))
        if refs is None:
            refs = self.early[(key, pid, n)] = [p.fresh(self.members[key]) for p in prototypes]
        return refs[i]

    def remote_semaphore(self, run, sem, target, what: str):
        ref, index = sem
        return self.counterpart(run, ref, target, what), index

    # -- waits ---------------------------------------------------------------------------------
    def wait(self, engine, sem, amount: int, kind: str, send) -> int:
        """Block this core until ``sem`` holds ``amount``: the other devices and cores run
        meanwhile (their DMAs and signals may satisfy it); returns what it holds then."""
        run = engine.run
        ref, index = sem
        who = self.describe(self.member(run))

        def ready():
            return int(ref.array[index]) >= amount or engine.signalling(sem, send)

        while int(ref.array[index]) < amount:
            wait_until(ready, f"{who} in kernel '{self.name}': {kind} "
                              f"on {ref.short()}{_show(index)} for {amount} (holds "
                              f"{int(ref.array[index])})", RaceError)
            engine.complete_signalling(sem, amount, send)
        return int(ref.array[index])

    # -- kernel end ----------------------------------------------------------------------------
    def leave(self, run) -> None:
        """The end of ``run``'s kernel body. A device's only run then waits for every device's,
        and checks what the kernel must not leave behind (the barrier semaphore back at zero);
        a core of several only ends (:meth:`leave_device` follows once all of them ended)."""
        key = self.member(run)
        self.ended.add(key)
        if len(self.cores[key[0]]) == 1:
            self.leave_device([run])

    def leave_device(self, runs) -> None:
        """Every core of a device ended (called once per device, by the device itself after its
        cores joined): wait for every device's kernel to end, then check each core's barrier
        semaphore."""
        run = runs[0]
        device = self.devices[run.device_rank]
        if run.options.detect_races:
            self.accesses.check_end(run.device_rank, lambda ref: ref.run.device_rank)
        _meet(device, "end of", run, None)
        for run in runs:
            if run.barrier is not None:
                run.dma.check_exit([run.barrier], "pallas_call")


def _meet(device, what, run, operand, custom_barrier=False):
    names = tuple(device.coords)
    rank = _rank(device)
    n = math.prod(device.sizes[a] for a in names)
    world = device.world
    combine = (lambda entries: [DeviceKernels(world, entries, custom_barrier)] * n) \
        if operand is not None else (lambda entries: [None] * n)
    return world.rendezvous(device, (f"pallas_call {what}", names), rank, n,
                            f"{what} pallas_call '{run.name}'", operand, combine)


def _rank(device) -> int:
    linear = 0
    for n, c in device.coords.items():
        linear = linear * device.sizes[n] + c
    return linear


def join(run, refs, compiler_params=None) -> "DeviceKernels | None":
    """At the start of a pallas_call: inside a shard_map body, meet this kernel's runs on the
    other devices (all allocated) and return what they share; None outside every shard_map."""
    return join_core_mesh({run.core: run}, {run.core: refs}, compiler_params)


def join_core_mesh(runs: dict, refs: dict, compiler_params=None) -> "DeviceKernels | None":
    """At the start of a kernel (``runs`` and ``refs`` by core: a pallas_call's or launch's
    single run, the cores of a ``pl.kernel`` / ``core_map`` over a TPU core mesh): inside a
    shard_map body, meet its runs on the other devices (all allocated: once per device, before
    its cores start, as JAX's interpret mode runs ``_barrier`` before its cores' threads) and
    return what they share; None outside every shard_map. Every core of every device may then
    address every other (:meth:`DeviceKernels.address`)."""
    device = current_device()
    if device is None:
        return None
    first = next(iter(runs.values()))
    for run in runs.values():
        run.device_rank = _rank(device)
    custom_barrier = getattr(compiler_params, "collective_id", None) is not None
    members = {core: (run, list(refs[core])) for core, run in runs.items()}
    group = _meet(device, "start of", first, (device, members), custom_barrier)
    for run in runs.values():
        run.devices = group   # (every message names the device: KernelRun.label)
        run.dma.inflight = group.inflight
        run.dma.unsettled = group.unsettled
    return group


# -- accesses to device memory from several devices (Mosaic GPU remote refs and multimem) --------

def members(run, axes) -> list:
    """The logical ids of the devices along the mesh ``axes`` from ``run``'s device (its own
    included), row-major over ``axes`` in the order given: the devices a multicast reaches."""
    group = run.devices
    device = group.devices[run.device_rank]
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    unknown = [a for a in axes if a not in device.coords]
    if unknown:
        raise UnsupportedPrimitiveError("multicast", {"collective_axes": tuple(axes)},
                                        f"axes {unknown} are not manual axes of the enclosing "
                                        f"shard_map {tuple(device.coords)}")
    out = []
    for linear in range(math.prod(device.sizes[a] for a in axes)):
        point = dict(device.coords)
        for a in reversed(axes):
            linear, point[a] = divmod(linear, device.sizes[a])
        out.append(group.target(run, point, "MESH", "multicast"))
    return out


class DeviceAccesses:
    """What each member of a kernel (a device's kernel; a core of a TPU core-mesh kernel) knows
    to have happened on the others, and the accesses to shared buffers they made (detect_races).

    Ordering is release/acquire through semaphores, at the granularity of members: a signal from
    member m (to any member's semaphore) releases m's accesses so far; a completed wait on a
    semaphore acquires what every signal of it so far released (a semaphore's increments are
    atomic read-modify-writes: an acquire that reads the sum synchronizes with each of them, PTX
    ISA "Memory consistency model", release sequences). Two accesses to the same element from
    different members, at least one a write, neither known to precede the other, race.
    ``describe(member)`` names a member in messages; ``noun`` says what a member is."""

    def __init__(self, n: int, describe, noun: str = "device"):
        self.describe, self.noun = describe, noun
        self.epoch = [0] * n                        # per member: its signals so far
        self.seen = [[-1] * n for _ in range(n)]    # seen[e][d]: d's last epoch e acquired
        self.published: dict = {}                   # semaphore key -> {member: epoch released}
        self.records: dict = {}                     # id(array) -> [(member, kind, region, epoch)]

    def publish(self, member: int, key) -> None:
        self.published.setdefault(key, {})[member] = self.epoch[member]
        self.epoch[member] += 1

    def acquire(self, member: int, key) -> None:
        seen = self.seen[member]
        for d, epoch in self.published.get(key, {}).items():
            if epoch > seen[d]:
                seen[d] = epoch

    def _ordered(self, member: int, other: int, epoch: int) -> bool:
        return other == member or epoch <= self.seen[member][other]

    def access(self, member: int, ref, index, kind: str, owner: "int | None" = None,
               how: str = "") -> None:
        """``member`` reads or writes ``ref[index]`` (``owner``: the member whose buffer it is,
        named in messages; ``how``: "DMA " for a DMA's)."""
        region = Region(ref, index)
        records = self.records.setdefault(id(ref.array), [])
        d = self.describe
        for other, other_kind, other_region, epoch in records:
            if (kind != "read" or other_kind[-4:] != "read") and \
                    not self._ordered(member, other, epoch) and other_region.overlaps(region):
                of = f" of {d(owner)}" if owner is not None else ""
                report_race(ref.run, RaceError(
                    f"{d(member)}: {how}{kind} of {region.describe()}{of} while {d(other)}'s "
                    f"{other_kind} of {other_region.describe()} is not known to precede it (no "
                    f"semaphore it signalled after that access was waited on by this {self.noun})"))
                break
        records.append((member, how + kind, region, self.epoch[member]))

    def check_end(self, member: int, owner_of) -> None:
        """``member``'s kernel ends (its outputs may be read, its inputs reused): every access
        another member made to its buffers (``owner_of(ref)``) must be known to precede the end."""
        for records in self.records.values():
            for other, kind, region, epoch in records:
                if owner_of(region.ref) == member and not self._ordered(member, other, epoch):
                    report_race(region.ref.run, RaceError(
                        f"{self.describe(member)}: the kernel ends while "
                        f"{self.describe(other)}'s {kind} of its {region.ref.short()} is not "
                        f"known to have completed (wait on a semaphore that {self.noun} signals "
                        "after it)"))
                    return


class DeviceTracker:
    """The access hook of kernel refs (KernelRef._before_access) for a kernel on several devices
    under detect_races: the kernel's own checks (``inner``), then, for device buffers
    (``tracked(ref)``), the cross-device ones of :class:`DeviceAccesses`. ``running()`` gives the
    kernel run making the access (its device may be another than the buffer's)."""

    def __init__(self, inner, group: DeviceKernels, tracked, running):
        self.inner, self.group, self.tracked, self.running = inner, group, tracked, running

    def check_access(self, ref, index, kind: str) -> None:
        if self.inner is not None:
            self.inner.check_access(ref, index, kind)
        if self.tracked(ref):
            running = self.running()   # (a run of no device: the buffer's device accesses it)
            accessor = ref.run.device_rank if running is None or running.device_rank is None \
                else running.device_rank
            self.group.accesses.access(accessor, ref, index, kind, owner=ref.run.device_rank)
