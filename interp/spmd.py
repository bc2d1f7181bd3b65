"""Interpreted devices for SPMD programs (``shard_map``, ``jax.pmap``): one thread per device,
collectives as rendezvous, run one device at a time.

The reference never needs N real devices: a ``shard_map`` over a mesh with manual axes of sizes
(2, 4) runs its body once per mesh coordinate, each in its own thread. Only the device holding
the baton executes (as in ``interp/pallas/cores.py``): it runs until it finishes or reaches a
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

A nested ``shard_map`` in one device spawns the inner devices (coordinates extended by the newly
manual axes) into the same world, so inner bodies may use collectives over outer axes too.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Sequence

from .errors import UndefinedBehaviorError


class DeadlockError(UndefinedBehaviorError):
    """Every unfinished interpreted device waits on a collective no device can complete."""


class CollectiveMismatchError(UndefinedBehaviorError):
    """Devices of one collective group reached different collectives."""


class Device:
    """One interpreted device: its world and its coordinates along the manual mesh axes."""
    __slots__ = ("world", "coords", "sizes", "key", "counters", "config")

    def __init__(self, world: "World", coords: dict, sizes: dict, key: tuple):
        self.world = world
        self.coords = coords      # manual axis name -> coordinate
        self.sizes = sizes        # manual axis name -> size
        self.key = key            # position in the world's device order
        self.counters: dict = {}  # group -> collectives this device has entered in it

    def describe(self) -> str:
        return "device(" + ", ".join(f"{n}={c}" for n, c in self.coords.items()) + ")"


_local = threading.local()


def current_device() -> "Device | None":
    """The interpreted device this thread runs, or None outside every shard_map/pmap body."""
    return getattr(_local, "device", None)


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


class World:
    """The devices of one outermost shard_map/pmap evaluation and their scheduler."""

    def __init__(self):
        self.cv = threading.Condition()
        self.order: list[tuple] = []      # device keys, in device order (nested devices follow their parent)
        self.current: "tuple | None" = None
        self.waiting: dict[tuple, tuple] = {}   # key -> (ready predicate, description)
        self.finished: set = set()
        self.error: BaseException | None = None
        self.slots: dict[tuple, _Slot] = {}

    # -- scheduling (called with self.cv held) ----------------------------------------------------
    def _pass_baton(self, key) -> None:
        if self.error is not None:
            self.current = None
            return
        n = len(self.order)
        i = self.order.index(key) if key in self.order else -1
        for k in range(1, n + 1):
            c = self.order[(i + k) % n]
            if c in self.finished:
                continue
            wait = self.waiting.get(c)
            if wait is None or wait[0]():
                self.current = c
                return
        self.current = None
        if any(c not in self.finished for c in self.order):
            waits = "; ".join(d for _, d in self.waiting.values())
            self.error = DeadlockError(
                "SPMD deadlock: every unfinished device waits and no collective can complete "
                f"({waits})")

    def _wait(self, key, ready, description: str) -> None:
        """Block device ``key`` (holding the baton) until ``ready()``; other devices run."""
        if ready():
            return
        with self.cv:
            self.waiting[key] = (ready, description)
            self._pass_baton(key)
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.current == key or self.error is not None)
            del self.waiting[key]
            if self.error is not None:
                raise _Aborted()

    # -- devices ------------------------------------------------------------------------------------
    def run_devices(self, parent: "Device | None", devices: Sequence[Device],
                    body: Callable[[Device], Any]) -> list:
        """Run ``body(device)`` for every device (in threads, one at a time); their results in
        device order. ``parent`` (a device of this world, or None at the top) waits meanwhile."""
        results: list = [None] * len(devices)
        config = _local_config()
        keys = [d.key for d in devices]

        def main(i: int, device: Device) -> None:
            with self.cv:
                self.cv.wait_for(lambda: self.current == device.key or self.error is not None)
                if self.error is not None:
                    self.finished.add(device.key)
                    return
            try:
                _local.device = device
                with contextlib.ExitStack() as stack:
                    for state, value in config:
                        stack.enter_context(state(value))
                    results[i] = body(device)
            except _Aborted:
                pass
            except BaseException as e:  # noqa: BLE001 - re-raised by the outermost run
                with self.cv:
                    if self.error is None:
                        self.error = e
            finally:
                _local.device = None
                with self.cv:
                    self.finished.add(device.key)
                    self._pass_baton(device.key)
                    self.cv.notify_all()

        threads = [threading.Thread(target=main, args=(i, d), daemon=True,
                                    name=f"spmd-{d.describe()}") for i, d in enumerate(devices)]
        with self.cv:
            at = self.order.index(parent.key) + 1 if parent is not None else len(self.order)
            self.order[at:at] = keys
            if parent is None:
                self.current = keys[0]
        for t in threads:
            t.start()
        if parent is None:
            for t in threads:
                t.join()
        else:
            # The parent device parks until its devices finish: they run on the baton it passes.
            done = set(keys)
            try:
                self._wait(parent.key, lambda: done <= self.finished,
                           f"{parent.describe()} waits for its nested shard_map")
            finally:
                with self.cv:
                    self.order = [k for k in self.order if k not in done]
                    self.finished -= done
            for t in threads:
                t.join()
        if self.error is not None and parent is None:
            raise self.error
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
            self._wait(device.key, lambda: slot.results is not None,
                       f"{device.describe()} waits in {name} (#{seq} of its group) for {missing} "
                       "more device(s)")
        with self.cv:
            out = slot.results[rank]
            slot.unread -= 1
            if slot.unread == 0:
                del self.slots[key]
        return out


class _Aborted(BaseException):
    """Another device failed: this one stops (the world re-raises the first error)."""


def run_spmd(axes: Sequence[tuple[str, int]], body: Callable[[Device], Any]) -> list:
    """Run ``body(device)`` once per coordinate of the mesh axes ``axes`` ((name, size), row-major
    in that order); returns the results in that order. Inside a device, the new devices extend its
    coordinates and join its world (a nested shard_map)."""
    parent = current_device()
    world = parent.world if parent is not None else World()
    base_coords = dict(parent.coords) if parent is not None else {}
    base_sizes = dict(parent.sizes) if parent is not None else {}
    base_key = parent.key if parent is not None else ()
    devices = []
    for linear in range(math.prod(s for _, s in axes)):
        coords = dict(base_coords)
        rest = linear
        for name, size in reversed(axes):
            rest, coords[name] = divmod(rest, size)
        coords = {**base_coords, **{n: coords[n] for n, _ in axes}}
        sizes = {**base_sizes, **dict(axes)}
        devices.append(Device(world, coords, sizes, base_key + (linear,)))
    return world.run_devices(parent, devices, body)


def _local_config() -> list:
    from .pallas.cores import _local_config as pallas_local_config
    return pallas_local_config()
