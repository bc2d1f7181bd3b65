"""One launch of a Mosaic GPU kernel (``plgpu.kernel``: an ``mpmd_map`` over a grid x cluster x
threads mesh): its clusters and warpgroups as cores of the schedule, its GMEM, and, inside a
shard_map body, its runs on the other devices."""
from __future__ import annotations

import collections
import functools
import itertools
import math

import numpy as np

from ...schedule import run_cores
from .. import memory
from ..devices import DeviceTracker, join
from ..grid import KernelRun, maybe_current_run
from ..memory import KernelRef
from ..mesh import MeshKernel
from . import barriers, tma, wgmma
from .cluster import ClusterState
from .errors import DeadlockError
from .races import ClusterAccesses
from .warpgroup import WarpgroupRun


def allocate_scratch(aval, name, run, opts) -> KernelRef:
    """A scratch buffer of a Mosaic GPU kernel: its own kinds (barriers, wgmma accumulators),
    else the core's (``interp.pallas.memory.allocate_scratch``)."""
    ref = barriers.allocate(aval, name, run)
    if ref is None:
        ref = wgmma.allocate_accumulator(aval, name, run, opts)
    return ref if ref is not None else memory.allocate_scratch(aval, name, run, opts)


class GpuMeshPlan(MeshKernel):
    """``mpmd_map`` over a Mosaic GPU mesh (``plgpu.kernel``): grid x cluster x threads."""

    def __init__(self, eqn):
        super().__init__(eqn)
        mesh = self.mesh
        self.grid_names, self.grid = tuple(mesh.grid_names), tuple(int(g) for g in mesh.grid)
        self.cluster_names = tuple(mesh.cluster_names)
        self.cluster = tuple(int(c) for c in mesh.cluster)
        self.thread_name = mesh.thread_name
        self.num_threads = int(mesh.num_threads or 1)
        self.blocks = list(itertools.product(*[range(c) for c in self.cluster]))
        self.axes = tuple(mesh.shape)
        self.sizes = tuple(int(s) for s in mesh.shape.values())
        n_operands = self.num_inputs + self.num_outputs
        self.scratch = [(v.aval, self.names[n_operands + i])
                        for i, v in enumerate(self.invars[n_operands:])]

    def run(self, args):
        opts = self.options
        arrays, inits = self.operand_buffers(args)
        clusters = list(itertools.product(*[range(g) for g in self.grid]))
        if opts.grid_order == "shuffled":
            order = np.random.default_rng(opts.seed).permutation(len(clusters))
            clusters = [clusters[i] for i in order]
        launch = Launch(self, arrays, inits)   # this launch's GMEM (across devices: its runs)
        launch.queue = collections.deque(clusters)
        threads = [(block, wg) for block in self.blocks for wg in range(self.num_threads)]
        # Every warpgroup of every cluster is a core of one schedule, cluster-major; the cores
        # start lazily (only when no started core can go on), so a cluster starts when the
        # started ones all wait or finished, and only the clusters that wait on another one keep
        # their state (and a parked thread) alive beside it.
        bodies = {}
        for point in clusters:
            order = threads
            if opts.grid_order == "shuffled" and len(threads) > 1:
                order = [threads[i] for i in np.random.default_rng(
                    (opts.seed or 0, *point)).permutation(len(threads))]
            for thread in order:
                bodies[WarpgroupCore(point, *thread)] = functools.partial(
                    self._run_thread, launch, point, thread)
        if len(bodies) == 1:
            next(iter(bodies.values()))()
        else:
            run_cores(bodies, self.name, deadlock=DeadlockError, lazy=True,
                      unit=lambda core: core.cluster)
        launch.leave()
        n_in = self.num_inputs
        self.check_outputs_written(launch.run, [KernelRef(a, self.names[n_in + o], launch.run,
                                                          init=inits[n_in + o], kind="output")
                                                for o, a in enumerate(arrays[n_in:])],
                                   inits[n_in:])
        return self.outputs(arrays)

    def allocate_scratch(self, aval, name, run) -> KernelRef:
        return allocate_scratch(aval, name, run, self.options)

    def _run_thread(self, launch, point, thread) -> None:
        """One warpgroup (``thread``: (block, warpgroup)) of cluster ``point``; the cluster starts
        with its first warpgroup to start, unless try_cluster_cancel cancelled it (then none of
        its warpgroups runs), and its state goes when its last warpgroup finished."""
        cluster = launch.clusters.get(point, False)
        if cluster is False:
            cluster = launch.clusters[point] = self._start_cluster(launch, point)
        if cluster is None:   # cancelled before it started
            return
        run, refs = cluster.runs.pop(thread)
        with run:
            self.kernel_plan.run(self.kernel_consts, refs)
            if run.pending is not None:
                run.raise_pending()
            tma.check_retired(run)
        cluster.unfinished -= 1
        if not cluster.unfinished:
            del launch.clusters[point]
            tma.cluster_finished(cluster)

    def _start_cluster(self, launch, point):
        """The ClusterState of cluster ``point`` as it starts (its warpgroup runs, its blocks'
        scratch SMEM), or None when try_cluster_cancel cancelled it (no longer in the launch
        queue)."""
        queue = launch.queue
        if queue and queue[0] == point:
            queue.popleft()
        elif point in queue:
            queue.remove(point)
        else:
            return None
        opts = self.options
        cluster = ClusterState(self, point)
        cluster.launch = launch
        for block in self.blocks:
            scratch = None
            for wg in range(self.num_threads):
                run = WarpgroupRun(self.name, self.sizes, opts, cluster, block, wg)
                run.mesh = cluster
                run.core = (block, wg)
                run.tracker = cluster
                launch.enter(run)   # across devices: the device's view of the others
                coords = point + block + ((wg,) if self.thread_name is not None else ())
                run.point = dict(zip(self.axes, coords))
                run.program_ids = coords
                run.kernel_grid = self.sizes
                if scratch is None:   # scratch operands are SMEM: one per block
                    scratch = [self.allocate_scratch(aval, name, run)
                               for aval, name in self.scratch]
                    cluster.register_block_allocation(("scratch",), block, scratch)
                refs = [KernelRef(a, self.names[k], run, init=launch.inits[k],
                                  kind="input (gmem)" if k < self.num_inputs else
                                  "output (gmem)",
                                  check_bounds=opts.check_bounds)
                        for k, a in enumerate(launch.arrays)]
                cluster.runs[run.core] = (run, refs + scratch)
        cluster.unfinished = len(cluster.runs)
        return cluster


class WarpgroupCore(collections.namedtuple("WarpgroupCore", "cluster block warpgroup")):
    """A warpgroup's key in the core schedule (deadlock messages name it); the warpgroups of a
    cluster start together (a cluster launches whole)."""
    __slots__ = ()

    def __repr__(self):
        return f"cluster {self.cluster}, block {self.block}, warpgroup {self.warpgroup}"


class LaunchRun(KernelRun):
    """A launch as the kernel's runs on other devices see it (interp/pallas/devices.py members):
    its GMEM is found through ``launch``."""
    __slots__ = ("launch",)

    def __init__(self, name, grid, options, launch):
        super().__init__(name, grid, options)
        self.launch = launch


class Launch:
    """One launch of a Mosaic GPU kernel: its GMEM (operands, semaphores reserved at launch)
    and, inside a shard_map body, its runs on the other devices (interp/pallas/devices.py:
    the launches meet at start and end; remote refs, multimem and remote signals address the
    same buffer of another device's launch)."""

    def __init__(self, plan, arrays, inits):
        opts = plan.options
        self.arrays, self.inits = arrays, inits
        self.queue = collections.deque()   # clusters not started, in launch order (the front is
        # the next to start; try_cluster_cancel cancels it)
        self.clusters = {}   # point -> its ClusterState while it runs, None once cancelled
        self.globals = {}    # get_global semaphores by equation: one per launch
        self.storing = []    # threads (WarpgroupRun) with TMA stores in flight (tma.store)
        # the GMEM accesses of its clusters, when it has several (races.ClusterAccesses)
        self.between_clusters = ClusterAccesses() if math.prod(plan.grid) > 1 else None
        self.allocations = {}   # key -> semaphores (block-local scope, reserved at launch)
        self.prototypes = {}    # key -> what they are made from (zero: zeroed at launch)
        self.run = LaunchRun(plan.name, plan.sizes, opts, self)
        self.refs = [KernelRef(a, plan.names[k], self.run, init=inits[k],
                               kind="input (gmem)" if k < plan.num_inputs else "output (gmem)",
                               check_bounds=opts.check_bounds)
                     for k, a in enumerate(arrays)]
        self.devices = join(self.run, self.refs)
        self.tracker = None
        if self.devices is not None and opts.detect_races:
            self.tracker = lambda inner: DeviceTracker(inner, self.devices,
                                                       lambda ref: "gmem" in ref.kind,
                                                       maybe_current_run)
            self.run.tracker = self.tracker(None)

    def semaphores(self, key, prototypes) -> list:
        if key not in self.allocations:
            self.prototypes[key] = prototypes
            self.allocations[key] = [p.fresh(self.run) for p in prototypes]
        return self.allocations[key]

    def enter(self, run) -> None:
        """A warpgroup run of this launch: in a shard_map, it knows the other devices."""
        if self.devices is None:
            return
        run.devices, run.device_rank = self.devices, self.run.device_rank
        if self.tracker is not None:
            run.tracker = self.tracker(run.tracker)

    def peer_buffer(self, ref, other):
        """``ref``'s buffer in the launch ``other`` (a KernelRun of another device), or None."""
        theirs = other.launch
        for k, array in enumerate(self.arrays):
            if ref.array is array:
                return theirs.refs[k]
        for key, refs in self.allocations.items():
            for i, r in enumerate(refs):
                if r is ref:
                    return theirs.semaphores(key, self.prototypes[key])[i]
        for eqn, r in self.globals.items():
            if r is ref:   # the peer's, reserved at its launch: made when first addressed
                if eqn not in theirs.globals:
                    theirs.globals[eqn] = allocate_scratch(eqn.params["what"], "global",
                                                           theirs.run, theirs.run.options)
                return theirs.globals[eqn]
        return None

    def leave(self) -> None:
        if self.devices is not None:
            self.devices.leave(self.run)


# -- cluster launch control (dynamic scheduling) -------------------------------------------------
# try_cluster_cancel asks the hardware to cancel the launch of a cluster that has not started and
# hand its work to the caller. Which request succeeds is the scheduler's choice: the reference
# cancels the next cluster of its launch order when one is left, and under grid_order="shuffled"
# fails a seeded random half of the requests, so a kernel is run under both outcomes. The 16-byte
# response holds int32 words (success, grid coordinates...): what query_cluster_cancel decodes,
# opaque to the kernel as on the hardware.

def try_cluster_cancel(run, barrier, expects: bool, responses) -> None:
    """try_cluster_cancel (PTX clusterlaunchcontrol.try_cancel): ``run`` arrives on its
    ``barrier``, with expect-tx of the 16-byte response when ``expects``; when it issues the
    request (``responses``: the (ref, index, barrier) the response lands in, per block of the
    cluster; empty for a thread that does not issue it), the response is multicast to them."""
    if expects:
        barrier.expect_tx(16)
    run.arrive(barrier)
    if not responses:
        return
    decision = _cancel(run)
    words = np.full(4, -1, np.int32)
    words[0] = decision is not None
    if decision is not None:
        words[1:1 + len(decision)] = decision
    tma.deliver(run, words, responses)


def _cancel(run):
    """The outcome of one cancellation request: the grid point of the cluster it cancels (the
    next one of the launch order), or None."""
    cluster = run.cluster
    queue = cluster.launch.queue
    if not queue:
        return None
    opts = run.options
    run.cancel_calls += 1
    if opts.grid_order == "shuffled" and np.random.default_rng(
            (opts.seed or 0, *cluster.point, *run.block, run.cancel_calls)).random() < 0.5:
        return None
    return queue.popleft()


def is_gpu_mesh(mesh) -> bool:
    """A Mosaic GPU mesh (grid, cluster, threads) rather than a TPU core mesh."""
    return all(hasattr(mesh, a) for a in ("grid_names", "cluster_names", "num_threads"))


def is_warp_mesh(mesh) -> bool:
    try:
        from jax._src.pallas.mosaic_gpu.core import WarpMesh
    except ImportError:   # no Mosaic GPU here (JAX 0.10.2 without absl-py)
        return False
    return isinstance(mesh, WarpMesh)
