"""One scheduler for everything the reference runs concurrently, and what each thread of it knows.

The interpreted devices of a ``shard_map`` / ``pmap`` (``interp/spmd.py``), the kernels they
launch, the cores of a Pallas core mesh (``pl.kernel`` / ``core_map``), the clusters and
warpgroups of a Mosaic GPU kernel and the warps of a ``warp_map`` are all *cores* of one
:class:`Scheduler`, run one at a time.

Only the core holding the baton executes: it runs until it finishes or waits on something that
is not ready (a semaphore, a barrier, a collective), then the baton passes to the next core (in
core order, or the seeded shuffled order) that can make progress. Runs are therefore
deterministic, and cross-core handshakes (``core_barrier``, signal/wait between cores,
collectives between devices) work. When every unfinished core waits and no one can signal, the
program deadlocks on hardware: the reference raises the scheduler's deadlock error (RaceError
for kernels, ``interp.spmd.DeadlockError`` for devices) naming the waits.

A core only needs a thread of its own while it waits (its Python stack must stay alive): a core
starts on the thread that hands it the baton when that thread is free (the caller's thread, or
the thread of a core that just finished), and on a pooled worker thread when the handing core
parks in a wait. A mesh whose cores never wait therefore runs entirely on the caller's thread,
and the baton passes to exactly the thread that takes it (a lock per parked core, not a
condition every thread wakes on). Which OS thread runs a core is invisible to the program: the
order in which cores run is the baton's.

Cores nest: a kernel's cores started inside a running core (a device of a ``shard_map``, a core of
an enclosing kernel) are forked into that core's scheduler (:func:`run_cores`), so one schedule
and one deadlock check span the devices, the kernels they launch and those kernels' cores; a
wait (:func:`wait_until`) always blocks the core the calling thread runs. A group of cores may
start lazily: its cores start only when no started core can go on, a unit at a time (the
warpgroups of a Mosaic GPU cluster start together: a kernel of 132 clusters keeps one cluster's
state alive at a time unless its clusters wait on each other); until then they stay out of the
rotation, and a unit of another group (another device's kernel) starts before the next of the
running core's own. A poll (:func:`poll`: Mosaic GPU ``barrier_test``) lets every other core that
can go on run first and answers "not ready" only when none can.

Per-thread state lives in one object, :data:`context` (a :class:`ThreadContext`): the core the
thread runs, the interpreted device it runs as, the Pallas kernels it is inside, the watcher of
an observed evaluation and the rules' scratch buffers. A core starts with its own core and
kernel stack, the device of the core that forked it and the watcher and race list of the thread
that started its schedule; the scratch buffers stay the thread's.

JAX keeps configuration set by context managers (``jax.threefry_partitionable``,
``jax.enable_x64``, ``pl.enable_debug_checks``...) per thread, and rules read it when they run:
each core runs under the values of the thread that started its schedule.
"""
from __future__ import annotations

import collections
import contextlib
import threading
import warnings

from .errors import RaceError, UndefinedBehaviorError


class ThreadContext(threading.local):
    """What the code running on one thread knows (one instance, :data:`context`; its fields are
    per thread). The scheduler sets ``core``, ``device``, ``runs`` and ``watcher`` for each core
    it starts on a thread and puts the thread's own back when it is done there."""
    core: "tuple | None"      # (scheduler, key) of the core this thread runs; None outside every
    #                           scheduler
    device: object            # the interpreted device (interp.spmd.Device) it runs as, or None
    #                           outside every shard_map / pmap body
    runs: list                # the Pallas kernel runs it is inside, innermost last
    #                           (interp.pallas.grid.KernelRun: entered with ``with run:``)
    watcher: object           # the watcher of an observed evaluation (conformance/observe.py:
    #                           Options.observer's steps call it), or None
    races: "list | None"      # where races found under Options(on_race="record") go (the list of
    #                           the innermost recording_races() block), or None
    scratch: dict             # slot -> buffer: the rules' scratch temporaries
    #                           (interp/rules/_scratch.py), kept per thread across cores

    def __init__(self):
        self.core = None
        self.device = None
        self.runs = []
        self.watcher = None
        self.races = None
        self.scratch = {}


context = ThreadContext()


@contextlib.contextmanager
def recording_races():
    """The races an evaluation under ``Options(on_race="record")`` finds in this block, on this
    thread and the cores its schedules run: a list of RaceErrors, in the order found."""
    here = context
    outer, here.races = here.races, []
    try:
        yield here.races
    finally:
        here.races = outer


def report_race(run, error: "RaceError | UndefinedBehaviorError") -> None:
    """A race a kernel engine found (the TPU DMA engine, remote DMAs and signals, the Mosaic GPU
    warpgroups and TMA: a RaceError, or the AsyncAccessError of an access to SMEM a TMA copy still
    writes): raised, or, under ``run.options.on_race == "record"``, appended to the
    list of the enclosing :func:`recording_races` block (a warning outside one), and the caller
    goes on with its access, in the schedule's order (spec: pallas_tpu/recorded-race,
    mosaic_gpu/recorded-race). Only races whose continuation is defined come here; a deadlock or
    a buffer that does not exist is raised."""
    if run.options.on_race == "raise":
        raise error
    if context.races is None:
        warnings.warn(f"{type(error).__name__} (on_race='record', no recording_races() block): "
                      f"{error}", RuntimeWarning, stacklevel=2)
    else:
        context.races.append(error)


def current_device():
    """The interpreted device this thread runs, or None outside every shard_map/pmap body."""
    return context.device


def running():
    """(scheduler, key) of the core the calling thread runs, or None outside every scheduler."""
    return context.core


def wait_until(ready, description: str, alone) -> None:
    """Block the calling core until ``ready()``: the other cores of its schedule (other
    warpgroups, cores, devices) run meanwhile. Outside every scheduler nothing else can make it
    ready: raises ``alone(description)``."""
    if ready():
        return
    here = running()
    if here is None:
        raise alone(description)
    scheduler, key = here
    scheduler.wait_until(key, ready, description)


def poll(ready, description: str) -> bool:
    """A non-blocking test the calling core repeats until ``ready()`` (a poll loop): when not
    ready, the core lets every other core that can go on (started or lazy) run first, and the
    test is made when ``ready()`` or when no other core can go on: its answer. Outside every
    scheduler nothing else can run: ``ready()``."""
    if ready():
        return True
    here = running()
    if here is None:
        return False
    scheduler, key = here
    return scheduler.poll(key, ready, description)


def handoffs() -> int:
    """How many times the baton passed to a core that could go on in the calling core's schedule
    so far (0 outside every scheduler; a polling core taking it because no other could go on
    does not count): a poll that answers False twice with no handoff between saw no other core
    make progress."""
    here = running()
    return 0 if here is None else here[0].handoffs


def waiting_descriptions() -> list:
    """What every waiting core of the calling core's schedule waits for (outside every
    scheduler: nothing)."""
    here = running()
    if here is None:
        return []
    with here[0].cv:
        return [d for _, d in here[0].waiting.values()]


def run_cores(bodies: dict, kernel_name: str, deadlock=RaceError, lazy: bool = False,
              unit=None) -> None:
    """Run ``bodies[core]()`` for every core, in the dict's order, as concurrent cores; returns
    when all finished, re-raising the first error. Called from a running core, they are forked
    into its scheduler (keys ``(that core, core)``); otherwise they get a scheduler of their own,
    whose deadlock raises ``deadlock``. ``lazy``: a core starts only when no started core can go
    on; among lazy cores, one of another run_cores call (another device's kernel) starts before
    the next one of the running core's own, so the devices' kernels progress side by side.
    ``unit(core)``: lazy cores of one unit (the warpgroups of a cluster) start together: once one
    started, the others are started as the baton reaches them."""
    here = context.core
    if here is None:
        scheduler = Scheduler(list(bodies), kernel_name, deadlock)
        if lazy:
            scheduler.make_lazy(bodies, None, unit)
        scheduler.run(bodies)
        return
    scheduler, parent = here
    scheduler.fork(parent, {(parent, core): body for core, body in bodies.items()}, lazy=lazy,
                   unit=None if unit is None else lambda key: unit(key[1]))


class Scheduler:
    """The cores of one schedule (see the module docstring): the rotation, who waits for what,
    the lazy groups, and the baton."""

    def __init__(self, order, kernel_name: str, deadlock=RaceError):
        self.order = list(order)
        self.deadlock = deadlock      # the error a deadlock raises
        self.kernel = kernel_name
        self.cv = threading.Condition()   # guards the scheduler's state
        self.current = None
        self.waiting: dict = {}       # core -> (ready predicate, description)
        self.finished: set = set()
        self.error: BaseException | None = None
        self.pending: dict = {}       # core -> (its body, the device it runs as), not started
        self._parked: dict = {}       # waiting core -> the lock its thread is parked on
        self._running = 0             # cores started and not finished
        self._done = threading.Event()
        self._config: list = []       # JAX configuration of the thread that started the run
        self._watcher = None          # context.watcher of that thread
        self._races = None            # context.races of that thread
        # Lazy cores start only when no started core can go on. Until then they are not in
        # ``order``: group (the forking core, None at the top) -> the units (lists of cores that
        # start together) not started, in order; the groups in the order they came.
        self.lazy_units: dict = {}
        self.lazy_groups: list = []
        self.group_of: dict = {}      # lazy core -> its group
        self.polling: set = set()     # waiting cores in a poll: they go on when no other can
        self.handoffs = 0             # times the baton passed to a core that could go on (not
        # to a polling core because no other could)

    def run(self, bodies: dict, devices: "dict | None" = None) -> None:
        """Run ``bodies[core]()`` for every core (as ``devices[core]``, when given); re-raises the
        first error of any core."""
        self._config = _local_config()
        self._watcher, self._races = context.watcher, context.races
        self.add(bodies, devices)
        self._done.clear()
        with self.cv:
            first = self.current = self.order[0] if self.order else self._start_lazy(None, 0)
            self._running += 1
        self._serve(first)
        self._done.wait()
        if self.error is not None:
            raise self.error

    def add(self, bodies: dict, devices: "dict | None" = None) -> None:
        """Cores that join the scheduler (their keys already in ``order``), running as
        ``devices[core]`` (default: as no device)."""
        pending = self.pending
        for core, body in bodies.items():
            pending[core] = (body, None if devices is None else devices[core])

    # -- the baton --------------------------------------------------------------------------------
    def _serve(self, core) -> None:
        """Run ``core`` (holding the baton) on this free thread, then every core the baton reaches
        that has not started while this thread stays free."""
        config = self._config
        here = context
        outer = here.core, here.device, here.runs, here.watcher, here.races
        while core is not None:
            body, device = self.pending.pop(core)
            here.core, here.device, here.runs, here.watcher, here.races = (
                (self, core), device, [], self._watcher, self._races)
            try:
                if config:
                    with contextlib.ExitStack() as stack:
                        for state, value in config:
                            stack.enter_context(state(value))
                        body()
                else:
                    body()
            except BaseException as e:  # noqa: BLE001 - re-raised by run()
                with self.cv:
                    if self.error is None:
                        self.error = e
            with self.cv:
                self.finished.add(core)
                self._running -= 1
                core, wake = self._dispatch(self._next(core), free=True)
            _wake(wake)
        here.core, here.device, here.runs, here.watcher, here.races = outer

    def _dispatch(self, nxt, free: bool):
        """Give the baton to ``nxt`` (called with the lock held by the thread giving it up):
        (the core this thread starts itself, only when ``free``; the parked threads to wake, or a
        core to start on a worker, which the caller does after releasing the lock, so that the
        woken thread finds the state settled and the lock free)."""
        if nxt is None:
            wake = list(self._parked.values())   # an error or a deadlock: unwind every waiter
            self._parked = {}
            if self._running == 0:
                self._done.set()
            return None, wake
        parked = self._parked.pop(nxt, None)
        if parked is not None:
            del self.waiting[nxt]
            return None, [parked]
        self._running += 1
        if free:
            return nxt, ()
        return None, nxt

    def _next(self, core):
        """The next core that can run after ``core`` (called with the lock held), or None when
        every core finished, after an error, or in a deadlock (which sets the error)."""
        if self.error is not None:
            self.current = None
            return None
        order = self.order
        i = order.index(core)
        if core in self.finished:   # a finished core leaves the rotation
            del order[i]
            i -= 1
        n = len(order)
        finished, waiting = self.finished, self.waiting
        for k in range(1, n + 1):
            c = order[(i + k) % n]
            if c in finished:
                continue
            wait = waiting.get(c)
            if wait is None or wait[0]():
                self.current = c
                self.handoffs += 1
                return c
        if self.lazy_groups:   # no started core can go on: a lazy one starts
            c = self._start_lazy(core, i + 1)
            if c is not None:
                self.current = c
                self.handoffs += 1
                return c
        # Nothing else can go on: a polling core goes on with its test's answer.
        for k in range(1, n + 1 if self.polling else 1):
            c = order[(i + k) % n]
            if c in self.polling:
                self.current = c
                return c
        self.current = None
        if order:   # unfinished cores, every one waiting
            self.error = self.deadlock_error()
        return None

    def deadlock_error(self) -> BaseException:
        """The error of a run where every unfinished core waits and none can go on."""
        waits = "; ".join(f"core {c}: {d}" for c, (_, d) in self.waiting.items())
        return self.deadlock(f"kernel '{self.kernel}': deadlock, every unfinished core "
                             f"waits and no core or DMA can signal it ({waits})")

    def make_lazy(self, cores, group, unit=None) -> None:
        """``cores`` (in order) start only when no started core can go on (``unit``: see
        run_cores); they leave ``order`` until then."""
        units: dict = {}
        for c in cores:
            units.setdefault(c if unit is None else unit(c), []).append(c)
            self.group_of[c] = group
        self.lazy_units[group] = collections.deque(units.values())
        self.lazy_groups.append(group)
        gone = set(cores)
        self.order = [c for c in self.order if c not in gone]

    def _start_lazy(self, core, at: int):
        """The first core of the next lazy unit (called with the lock held), which joins the
        rotation at ``at`` (after ``core``): a unit of the group after ``core``'s goes first (the
        devices' kernels progress side by side), the next of its own group last; None when none
        is left."""
        groups = self.lazy_groups
        group = self.group_of.get(core, core)
        j = groups.index(group) if group in groups else -1
        for k in range(1, len(groups) + 1):
            units = self.lazy_units[groups[(j + k) % len(groups)]]
            if units:
                started = units.popleft()
                self.order[at:at] = started
                return started[0]
        return None

    def fork(self, parent, bodies: dict, lazy: bool = False, unit=None,
             devices: "dict | None" = None, waits: "str | None" = None) -> None:
        """Run ``bodies[core]()`` as new cores beside the running ones (a kernel's cores inside a
        device, the devices of a nested shard_map, the warps of a Mosaic GPU ``warp_map``),
        ``parent`` (the caller, holding the baton) waiting until all of them finished: a
        fork/join. The new cores join the schedule right after ``parent`` and leave it when they
        are done (their keys may be forked again). They run as ``devices[core]``, by default as
        the device the parent runs as; ``waits`` says what the parent waits for in a deadlock's
        message."""
        children = list(bodies)
        done = set(children)
        if devices is None:
            device = context.device
            devices = dict.fromkeys(children, device)
        if waits is None:
            device = context.device
            who = device.describe() if device is not None else f"core {parent}"
            waits = f"{who} waits for {len(children)} forked cores to finish"
        with self.cv:
            i = self.order.index(parent)
            self.add(bodies, devices)
            if lazy:
                self.make_lazy(children, parent, unit)
            else:
                self.order[i + 1:i + 1] = children
        try:
            self.wait_until(parent, lambda: done <= self.finished, waits)
        finally:
            with self.cv:
                self.order = [c for c in self.order if c not in done]
                self.finished -= done
                for c in children:
                    self.pending.pop(c, None)
                    self.group_of.pop(c, None)
                if self.lazy_units.pop(parent, None) is not None:
                    self.lazy_groups.remove(parent)

    def wait_until(self, core, ready, description: str) -> None:
        """Block ``core`` (the caller, holding the baton) until ``ready()``; other cores run."""
        if ready():
            return
        self._park(core, ready, description)

    def poll(self, core, ready, description: str) -> bool:
        """``core`` (the caller, holding the baton) lets every other core that can go on run
        first; True once ``ready()``, False when no other core could go on and it is not."""
        if ready():
            return True
        with self.cv:
            self.polling.add(core)
        try:
            self._park(core, ready, description)
        finally:
            with self.cv:
                self.polling.discard(core)
        return bool(ready())

    def _park(self, core, ready, description: str) -> None:
        lock = threading.Lock()
        lock.acquire()
        with self.cv:
            self.waiting[core] = (ready, description)
            nxt = self._next(core)
            if nxt == core:   # a poll nobody else can answer: the baton stays here
                del self.waiting[core]
                return
            self._parked[core] = lock
            _, wake = self._dispatch(nxt, free=False)
        if type(wake) is list:
            _wake(wake)
        else:
            _submit(self._serve, wake)
        lock.acquire()   # parked until the baton comes back (or an error unwinds every core)
        if self.error is not None:
            with self.cv:
                self.waiting.pop(core, None)
            raise self.error


def _wake(locks) -> None:
    for lock in locks:
        lock.release()


# Worker threads that run cores started by a core that parked: kept between runs, since starting
# a thread costs more than most cores' work.
_idle: list = []
_idle_lock = threading.Lock()


class _Worker:
    def __init__(self):
        self.go = threading.Lock()
        self.go.acquire()
        self.task = None
        threading.Thread(target=self._loop, daemon=True, name="pallas-core-worker").start()

    def _loop(self) -> None:
        while True:
            self.go.acquire()
            fn, arg = self.task
            self.task = None
            try:
                fn(arg)
            finally:
                with _idle_lock:
                    _idle.append(self)


def _submit(fn, arg) -> None:
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
    worker.task = (fn, arg)
    worker.go.release()


def _local_config() -> list:
    """(config state, value) of every JAX option the calling thread sets locally."""
    from jax._src import config
    unset = config.config_ext.unset
    return [(state, value) for state in list(config.config_states.values())
            if (value := state.get_local()) is not unset]
