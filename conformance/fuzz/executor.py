"""Executors run work units somewhere and hand back their results as they complete.

The interface (what a cluster executor implements too):

    submit(unit, priority=False)   # queue a unit (priority: ahead of the others, e.g. shrinking)
    results(timeout) -> list       # (unit, result) pairs finished since the last call
    pending() -> int               # submitted and not yet returned
    close()                        # stop; units not started are dropped (a resume runs them)

:class:`LocalProcesses` is the embedded default: N isolated worker processes
(conformance/isolation.py), each driven by a thread. A unit that crashes its worker (segfault,
abort) or runs past the timeout comes back as a ``crash`` / ``timeout`` result with the worker's
output; the worker is replaced and the campaign goes on.
"""
from __future__ import annotations

import collections
import queue
import threading

from .work import Unit


class Executor:
    def submit(self, unit: Unit, priority: bool = False) -> None:
        raise NotImplementedError

    def results(self, timeout: float | None = None) -> list[tuple[Unit, dict]]:
        raise NotImplementedError

    def pending(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class LocalProcesses(Executor):
    def __init__(self, workers: int = 1, timeout_s: float = 300.0, shrink_timeout_s: float | None = None,
                 env: dict | None = None):
        from conformance.isolation import Worker
        self.timeout_s = timeout_s
        self.shrink_timeout_s = shrink_timeout_s
        self._todo: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._done: queue.Queue = queue.Queue()
        self._pending = 0
        self._stop = False
        self._workers = [Worker(env=env, module="conformance.fuzz.worker") for _ in range(max(1, workers))]
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
            timeout = self.timeout_s
            if unit.kind == "shrink":
                timeout = self.shrink_timeout_s or max(self.timeout_s, 3 * unit.budget_s + 120)
            try:
                reply = worker.request(unit.as_dict(), timeout)
            except Exception as e:  # noqa: BLE001  (a worker that cannot start: reported per unit)
                reply = {"unit": unit.as_dict(), "harness_error": f"{type(e).__name__}: {e}"}
            if not isinstance(reply, dict):
                outcome, output = reply
                reply = {"unit": unit.as_dict(), "isolation": outcome, "output": output}
            self._done.put((unit, reply))

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._todo.clear()
            self._cv.notify_all()
        for w in self._workers:
            w.close()
