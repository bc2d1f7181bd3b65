"""Several cores of a core mesh (``pl.kernel`` / ``core_map``), run one at a time.

Each core runs in its own thread but only the core holding the baton executes: it runs until it
finishes or waits on a semaphore that is not ready, then the baton passes to the next core (in
core order, or the seeded shuffled order) that can make progress. Runs are therefore
deterministic, and cross-core handshakes (``core_barrier``, signal/wait between cores) work.
When every unfinished core waits and no one can signal, the program deadlocks on hardware: the
reference raises :class:`RaceError` naming the waits.

JAX keeps configuration set by context managers (``jax.threefry_partitionable``,
``jax.enable_x64``, ``pl.enable_debug_checks``...) per thread, and rules read it when they run:
each core thread runs under the caller's values.
"""
from __future__ import annotations

import contextlib
import threading

from ..errors import RaceError


class CoreScheduler:
    def __init__(self, order, kernel_name: str, deadlock=RaceError):
        self.order = list(order)
        self.deadlock = deadlock      # the error a deadlock raises
        self.kernel = kernel_name
        self.cv = threading.Condition()
        self.current = None
        self.waiting: dict = {}       # core -> (ready predicate, description)
        self.finished: set = set()
        self.error: BaseException | None = None

    def run(self, bodies: dict) -> None:
        """Run ``bodies[core]()`` for every core; re-raises the first error of any core."""
        config = _local_config()
        threads = [threading.Thread(target=self._main, args=(c, bodies[c], config), daemon=True,
                                    name=f"pallas-core-{c}") for c in self.order]
        with self.cv:
            self.current = self.order[0]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _main(self, core, body, config) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.current == core or self.error is not None)
            if self.error is not None:
                return
        try:
            with contextlib.ExitStack() as stack:
                for state, value in config:
                    stack.enter_context(state(value))
                body()
        except BaseException as e:  # noqa: BLE001 - re-raised by run()
            with self.cv:
                if self.error is None:
                    self.error = e
        finally:
            with self.cv:
                self.finished.add(core)
                self._pass_baton(core)
                self.cv.notify_all()

    def _pass_baton(self, core) -> None:
        """Give the baton to the next core that can run (called with the lock held)."""
        if self.error is not None:
            self.current = None
            return
        n = len(self.order)
        i = self.order.index(core)
        for k in range(1, n + 1):
            c = self.order[(i + k) % n]
            if c in self.finished:
                continue
            wait = self.waiting.get(c)
            if wait is None or wait[0]():
                self.current = c
                return
        self.current = None
        if len(self.finished) < n:
            self.error = self.deadlock_error()

    def deadlock_error(self) -> BaseException:
        """The error of a run where every unfinished core waits and none can go on."""
        waits = "; ".join(f"core {c}: {d}" for c, (_, d) in self.waiting.items())
        return self.deadlock(f"kernel '{self.kernel}': deadlock, every unfinished core "
                             f"waits and no core or DMA can signal it ({waits})")

    def fork(self, parent, bodies: dict) -> None:
        """Run ``bodies[core]()`` as new cores beside the running ones (the warps of a Mosaic GPU
        ``warp_map``), ``parent`` (the caller, holding the baton) waiting until all of them
        finished: a fork/join. The new cores leave the schedule when they are done."""
        children = list(bodies)
        config = _local_config()
        with self.cv:
            i = self.order.index(parent)
            self.order[i + 1:i + 1] = children
        threads = [threading.Thread(target=self._main, args=(c, bodies[c], config), daemon=True,
                                    name=f"pallas-core-{c}") for c in children]
        for t in threads:
            t.start()
        try:
            self.wait_until(parent, lambda: all(c in self.finished for c in children),
                            f"waits for {len(children)} forked cores to finish")
        finally:
            if self.error is not None:
                with self.cv:
                    self.cv.notify_all()
            for t in threads:
                t.join()
            with self.cv:
                for c in children:
                    self.order.remove(c)
                    self.finished.discard(c)

    def wait_until(self, core, ready, description: str) -> None:
        """Block ``core`` (the caller, holding the baton) until ``ready()``; other cores run."""
        if ready():
            return
        with self.cv:
            self.waiting[core] = (ready, description)
            self._pass_baton(core)
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.current == core or self.error is not None)
            del self.waiting[core]
            if self.error is not None:
                raise self.error


def _local_config() -> list:
    """(config state, value) of every JAX option the calling thread sets locally."""
    from jax._src import config
    unset = config.config_ext.unset
    return [(state, value) for state in list(config.config_states.values())
            if (value := state.get_local()) is not unset]
