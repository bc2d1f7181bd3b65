"""Executors run work units somewhere and hand back their results as they complete.

The interface (what a cluster executor implements too):

    submit(unit, priority=False)   # queue a unit (priority: ahead of the others, e.g. shrinking)
    results(timeout) -> list       # (unit, result) pairs finished since the last call
    pending() -> int               # submitted and not yet returned
    close()                        # stop; units not started are dropped (a resume runs them)
    slots                          # how many units it runs at once (the campaign keeps twice that in flight)

:class:`LocalProcesses` is the embedded default: N isolated worker processes
(conformance/isolation.py), each driven by a thread. A unit that crashes its worker (segfault,
abort) or runs past the timeout comes back as a ``crash`` / ``timeout`` result with the worker's
output; the worker is replaced and the campaign goes on. :class:`RayCluster` hands the same units
to a Ray cluster (conformance/cluster.py), where each node answers them the same way.
"""
from __future__ import annotations

import collections
import queue
import threading

from .work import Unit


class Executor:
    slots = 1

    def submit(self, unit: Unit, priority: bool = False) -> None:
        raise NotImplementedError

    def results(self, timeout: float | None = None) -> list[tuple[Unit, dict]]:
        raise NotImplementedError

    def pending(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


WORKER_MODULE = "conformance.fuzz.worker"


def unit_timeout(unit: Unit, timeout_s: float, shrink_timeout_s: float | None = None) -> float:
    """Seconds before a unit counts as a hang: ``timeout_s`` for a program; for shrinking, its own
    limit or enough for its shrinking and bisection budgets."""
    if unit.kind == "shrink":
        return shrink_timeout_s or max(timeout_s, 3 * unit.budget_s + 120)
    return timeout_s


def ask(worker, request: dict, timeout: float) -> dict:
    """The isolated worker's result for one unit (``request``: the unit as a dict); a worker that
    died or hung answers ``{"isolation": "crash"|"timeout", "output"}``, one that could not start
    ``{"harness_error"}``."""
    try:
        reply = worker.request(request, timeout)
    except Exception as e:  # noqa: BLE001  (a worker that cannot start: reported per unit)
        return {"unit": request, "harness_error": f"{type(e).__name__}: {e}"}
    if not isinstance(reply, dict):
        outcome, output = reply
        reply = {"unit": request, "isolation": outcome, "output": output}
    return reply


class LocalProcesses(Executor):
    def __init__(self, workers: int = 1, timeout_s: float = 300.0, shrink_timeout_s: float | None = None,
                 env: dict | None = None, host_devices: int = 1):
        """``host_devices``: the XLA:CPU devices the programs need (families.host_devices)."""
        from conformance.isolation import Worker
        self.timeout_s = timeout_s
        self.shrink_timeout_s = shrink_timeout_s
        self._todo: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._done: queue.Queue = queue.Queue()
        self._pending = 0
        self._stop = False
        self._workers = [Worker(env=env, module=WORKER_MODULE, host_devices=host_devices) for _ in range(max(1, workers))]
        self.slots = len(self._workers)
        self._threads = [threading.Thread(target=self._drive, args=(w,), daemon=True) for w in self._workers]
        for t in self._threads:
            t.start()

    def submit(self, unit: Unit, priority: bool = False) -> None:
        with self._cv:
            (self._todo.appendleft if priority else self._todo.append)(unit)
            self._pending += 1
            self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return self._pending

    def results(self, timeout: float | None = None) -> list[tuple[Unit, dict]]:
        out = []
        try:
            out.append(self._done.get(timeout=timeout))
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        with self._cv:
            self._pending -= len(out)
        return out

    def _drive(self, worker) -> None:
        while True:
            with self._cv:
                while not self._todo and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                unit = self._todo.popleft()
            self._done.put((unit, ask(worker, unit.as_dict(), unit_timeout(unit, self.timeout_s,
                                                                           self.shrink_timeout_s))))

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._todo.clear()
            self._cv.notify_all()
        for w in self._workers:
            w.close()


def ray_task(request: dict, timeout: float) -> dict:
    """On a cluster node: a unit's result from the isolated fuzz worker this Ray worker process
    keeps (as a LocalProcesses thread), and the node that answered."""
    from conformance import cluster

    def make():
        from conformance import process_env
        from conformance.isolation import Worker

        from .families import FAMILIES, host_devices
        process_env.apply()
        # (one worker per Ray worker process, kept between units of any family: the most devices any needs)
        return Worker(module=WORKER_MODULE, host_devices=host_devices(FAMILIES))
    return dict(ask(cluster.kept("fuzz", make), request, timeout), node=cluster.node_id())


class RayCluster(Executor):
    """Units as Ray tasks on the cluster at ``address`` (``auto`` or ``ray://HOST:PORT``), each on a
    node with the resources its runners need (conformance/cluster.py ``resources``). Ray resubmits
    the tasks of a node lost mid-campaign; each unit's result comes back once. ``priority`` has no
    effect (Ray starts tasks as resources free up)."""

    def __init__(self, address: str, timeout_s: float = 300.0, shrink_timeout_s: float | None = None):
        from conformance import cluster
        self.timeout_s, self.shrink_timeout_s = timeout_s, shrink_timeout_s
        self.slots = cluster.slots(cluster.connect(address))
        self._units = cluster.Units()
        self._needs: dict = {}
        self.nodes: dict = {}          # unit key -> the node that answered it (for tests and logs)

    def _need(self, runners) -> dict:
        from conformance import cluster
        if runners not in self._needs:
            self._needs[runners] = cluster.resources(cluster.runner_platforms(runners))
        return self._needs[runners]

    def submit(self, unit: Unit, priority: bool = False) -> None:
        timeout = unit_timeout(unit, self.timeout_s, self.shrink_timeout_s)
        self._units.submit(unit, ray_task, (unit.as_dict(), timeout), self._need(unit.runners))

    def pending(self) -> int:
        return self._units.pending()

    def results(self, timeout: float | None = None) -> list[tuple[Unit, dict]]:
        out = []
        for unit, reply in self._units.ready(timeout):
            if "node" in reply:
                self.nodes[(unit.kind, unit.key)] = reply.pop("node")
            out.append((unit, reply))
        return out

    def close(self) -> None:
        self._units.close()
