"""Interpreted devices for SPMD programs (``shard_map``, ``jax.pmap``): one thread of control per
device, collectives as rendezvous, run one device at a time. (Straight-line bodies on small
shards are evaluated for all devices at once instead, with the same results:
``interp/spmd_lockstep.py``.)

The reference never needs N real devices: a ``shard_map`` over a mesh with manual axes of sizes
(2, 4) runs its body once per mesh coordinate, each a core of a ``Scheduler`` (with a thread
of its own only while it waits). Only the device holding
the baton executes (``interp/schedule.py``): it runs until it finishes or reaches a
collective whose other participants have not arrived, then the baton passes to the next device
that can make progress, in device order. Runs are therefore deterministic, and every construct
the body may contain (``while``/``cond``/``scan`` around collectives, nested ``shard_map``) works
as on hardware, where each device runs its own program and collectives synchronise them.

A collective is a rendezvous of the devices whose coordinates differ only along the collective's
axes (or of one ``axis_index_groups`` group): the last to arrive computes every participant's
result from all operands (in participant order, so the result never depends on the schedule).
Devices of one group must reach the same collectives in the same order: a device meeting a
different collective is an ``UndefinedBehaviorError``; when every unfinished device waits and no
rendezvous can complete (a collective under a branch only some devices take, a ``while`` whose
trip count differs between devices), the program would hang on hardware: the reference raises
``DeadlockError`` naming the devices and what each waits for.

Pallas kernels in a device's body wait on semaphores the kernels of other devices signal (remote
DMAs, ``semaphore_signal`` with a ``device_id``): such a wait passes the baton like a collective
does (``interp/pallas/devices.py``), and a deadlock names each device's semaphore.

A nested ``shard_map`` in one device spawns the inner devices (coordinates extended by the newly
manual axes) into the same world, so inner bodies may use collectives over outer axes too.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .errors import UndefinedBehaviorError
from .schedule import Scheduler, current_device, wait_until


class DeadlockError(UndefinedBehaviorError):
    """Every unfinished interpreted device waits on a collective no device can complete."""


class CollectiveMismatchError(UndefinedBehaviorError):
    """Devices of one collective group reached different collectives."""


class Device:
    """One interpreted device: its world and its coordinates along the manual mesh axes."""
    __slots__ = ("world", "coords", "sizes", "key", "counters")

    def __init__(self, world: "World", coords: dict, sizes: dict, key: tuple):
        self.world = world
        self.coords = coords      # manual axis name -> coordinate
        self.sizes = sizes        # manual axis name -> size
        self.key = key            # position in the world's device order
        self.counters: dict = {}  # group -> collectives this device has entered in it

    def describe(self) -> str:
        return "device(" + ", ".join(f"{n}={c}" for n, c in self.coords.items()) + ")"


class _Slot:
    """One rendezvous in progress: the operands of its participants, then their results."""
    __slots__ = ("name", "nranks", "operands", "devices", "results", "unread", "combine")

    def __init__(self, name: str, nranks: int, combine: Callable):
        self.name = name
        self.nranks = nranks
        self.combine = combine
        self.operands: dict[int, Any] = {}
        self.devices: dict[int, Device] = {}
        self.results: "list | None" = None
        self.unread = nranks


class World(Scheduler):
    """The devices of one outermost shard_map/pmap evaluation: a scheduler whose cores are the
    devices (one runs at a time, the baton passing in device order; ``schedule.current_device()``
    answers the device a core runs as), coming and going with nested shard_maps, plus the
    rendezvous in progress."""

    def __init__(self):
        super().__init__([], "shard_map")
        self.slots: dict[tuple, _Slot] = {}

    def deadlock_error(self) -> BaseException:
        waits = "; ".join(d for _, d in self.waiting.values())
        return DeadlockError("SPMD deadlock: every unfinished device waits and no collective, "
                             f"DMA or semaphore signal can complete it ({waits})")

    # -- devices ------------------------------------------------------------------------------------
    def run_devices(self, parent: "Device | None", devices: Sequence[Device],
                    body: Callable[[Device], Any]) -> list:
        """Run ``body(device)`` for every device (in threads, one at a time); their results in
        device order. ``parent`` (a device of this world, or None at the top) waits meanwhile."""
        results: list = [None] * len(devices)

        def on_device(i: int, device: Device):
            def run() -> None:
                results[i] = body(device)
            return run

        bodies = {d.key: on_device(i, d) for i, d in enumerate(devices)}
        as_devices = {d.key: d for d in devices}
        if parent is None:
            self.order = list(bodies)
            self.run(bodies, as_devices)
            return results
        # A nested shard_map: the new devices join this world after their parent, which parks
        # until they finish (they run on the baton it passes).
        self.fork(parent.key, bodies, devices=as_devices,
                  waits=f"{parent.describe()} waits for its nested shard_map")
        return results

    # -- collectives -----------------------------------------------------------------------------
    def rendezvous(self, device: Device, group: tuple, rank: int, nranks: int, name: str,
                   operand: Any, combine: Callable[[list], list]) -> Any:
        """Contribute ``operand`` as participant ``rank`` of ``group``; returns this participant's
        entry of ``combine(operands in rank order)``, computed once by the last to arrive."""
        seq = device.counters.get(group, 0)
        device.counters[group] = seq + 1
        key = (group, seq)
        with self.cv:
            slot = self.slots.get(key)
            if slot is None:
                slot = self.slots[key] = _Slot(name, nranks, combine)
            elif slot.name != name or slot.nranks != nranks:
                other = next(iter(slot.devices.values()))
                raise CollectiveMismatchError(
                    f"{device.describe()} reached {name} while {other.describe()} reached "
                    f"{slot.name} as the same collective of their group: devices must execute "
                    "the same collectives in the same order (on hardware this hangs or mixes data)")
            slot.operands[rank] = operand
            slot.devices[rank] = device
            complete = len(slot.operands) == nranks
        if complete:
            slot.results = list(slot.combine([slot.operands[r] for r in range(nranks)]))
            slot.operands.clear()
        else:
            missing = nranks - len(slot.operands)
            # (the running core: the device itself, or a core of a kernel it launched)
            wait_until(lambda: slot.results is not None,
                       f"{device.describe()} waits in {name} (#{seq} of its group) for "
                       f"{missing} more device(s)", DeadlockError)
        with self.cv:
            out = slot.results[rank]
            slot.unread -= 1
            if slot.unread == 0:
                del self.slots[key]
        return out


def run_spmd(axes: Sequence[tuple[str, int]], body: Callable[[Device], Any]) -> list[tuple[Device, Any]]:
    """Run ``body(device)`` once per coordinate of the mesh axes ``axes`` ((name, size), row-major
    in that order); returns (device, its result) in that order. Inside a device, the new devices extend its
    coordinates and join its world (a nested shard_map)."""
    parent = current_device()
    world = parent.world if parent is not None else World()
    base_coords = dict(parent.coords) if parent is not None else {}
    base_sizes = dict(parent.sizes) if parent is not None else {}
    base_key = parent.key if parent is not None else ()
    devices = []
    for linear in range(math.prod(s for _, s in axes)):
        coords, rest = {}, linear
        for name, size in reversed(axes):
            rest, coords[name] = divmod(rest, size)
        coords = {**base_coords, **{n: coords[n] for n, _ in axes}}
        devices.append(Device(world, coords, {**base_sizes, **dict(axes)}, base_key + (linear,)))
    return list(zip(devices, world.run_devices(parent, devices, body)))
