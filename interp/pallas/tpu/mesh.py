"""Pallas TPU kernels over a core mesh (``pl.kernel`` / ``core_map`` over a ``TensorCoreMesh``
or another core mesh: ``mpmd_map``): the body runs once per core, the cores taking turns in the
schedule (``interp.schedule``)."""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ...schedule import run_cores
from ..devices import DeviceAccesses, join_core_mesh
from ..grid import KernelRun
from ..memory import KernelRef, memory_space
from ..mesh import MeshKernel


class MeshPlan(MeshKernel):
    """``mpmd_map`` (``pl.kernel`` / ``core_map`` over a TPU core mesh): the body runs once per
    core of the mesh on whole (HBM) operands; scratch and the barrier semaphore are core-local
    except shared memory spaces.

    Cores run one at a time (``interp.schedule``): in core order, or a seeded random order
    with ``grid_order="shuffled"`` since they are concurrent on hardware; a core that waits on a
    semaphore lets the others run, so barriers and cross-core signals work, and a wait no core
    can satisfy is a deadlock (RaceError). Under detect_races the cores' DMAs are ordered only by
    semaphores (``MeshState.order``, spec mpmd_map/c7). Inside a shard_map body the cores are
    forked into the devices' schedule: a device meets the other devices once before its cores
    start and once after all of them ended (interp.pallas.devices), and any core may address any
    core of any device.
    """

    def __init__(self, eqn):
        super().__init__(eqn)
        shape = dict(getattr(self.mesh, "shape", {}))
        if not shape:
            raise eqn.unsupported(f"mesh {self.mesh!r} without named axes")
        self.axes = tuple(shape)
        self.sizes = tuple(int(shape[a]) for a in self.axes)

    def run(self, args):
        opts = self.options
        n_in = self.num_inputs
        main = KernelRun(self.name, self.sizes, opts)
        arrays, inits = self.operand_buffers(args)

        def operand_refs(run):
            return [KernelRef(a, self.names[k], run, init=inits[k],
                              kind="input (hbm)" if k < n_in else "output (hbm)",
                              check_bounds=opts.check_bounds) for k, a in enumerate(arrays)]

        refs = operand_refs(main)
        scratch_vars = self.invars[len(refs):]
        shared = [self.allocate_scratch(v.aval, self.names[len(refs) + i], main)
                  if "shared" in memory_space(v.aval) else None
                  for i, v in enumerate(scratch_vars)]
        points = list(itertools.product(*[range(s) for s in self.sizes]))
        if opts.grid_order == "shuffled":
            points = [points[i] for i in np.random.default_rng(opts.seed).permutation(len(points))]
        mesh = MeshState(self.axes, self.sizes)
        runs, locals_ = {}, {}
        for point in points:
            run = CoreRun(self.name, self.sizes, opts)
            run.kernel_grid = ()
            run.point = dict(zip(self.axes, point))
            run.mesh = mesh
            run.core = point
            run.barrier = KernelRef(np.zeros((), np.int64), "barrier semaphore", run,
                                    kind="semaphore", check_bounds=opts.check_bounds)
            mesh.barriers[point] = run.barrier
            runs[point] = run
            mesh.runs[point] = run
            locals_[point] = [s if s is not None else
                              self.allocate_scratch(v.aval, self.names[len(refs) + i], run)
                              for i, (s, v) in enumerate(zip(shared, scratch_vars))]
        mesh.register(locals_)
        # Each core's operand refs (same memory) name that core in messages.
        kernel_refs = {point: operand_refs(runs[point]) + locals_[point] for point in points}
        # in a shard_map: the other devices' runs of this kernel
        devices = join_core_mesh(runs, kernel_refs, self.compiler_params)
        if opts.detect_races and len(points) > 1 and devices is None:
            # The cores share HBM: their DMAs are ordered only through semaphores (mpmd_map/c7).
            order = sorted(points)
            mesh.member = {p: i for i, p in enumerate(order)}
            mesh.order = DeviceAccesses(
                len(order), lambda i: f"kernel '{self.name}' core {dict(zip(self.axes, order[i]))}",
                noun="core")

        def body(point):
            run = runs[point]
            with run:
                self.kernel_plan.run(self.kernel_consts, kernel_refs[point])
                if run.pending is not None:
                    run.raise_pending()
                if devices is not None:
                    devices.leave(run)

        if len(points) == 1:
            body(points[0])
        else:
            run_cores({p: functools.partial(body, p) for p in points}, self.name)
            if devices is not None:   # the device's end: once, after all its cores ended
                devices.leave_device([runs[p] for p in points])
        for point in points:
            run = runs[point]
            sems = [r for r in locals_[point] if r.kind == "semaphore"]
            run.dma.check_exit(sems + [run.barrier], "kernel")
            run.check_exit()
        main.dma.check_exit([r for r in shared if r is not None and r.kind == "semaphore"],
                            "kernel")
        self.check_outputs_written(main, refs[n_in:], inits[n_in:])
        return self.outputs(arrays)


class CoreRun(KernelRun):
    """One core of a TPU core-mesh kernel: its run_scoped allocations have counterparts on the
    other cores (the same run_scoped, the same occurrence), which a signal with core_index
    addresses (``MeshState.counterpart``)."""
    __slots__ = ("scoped_counts",)

    def __init__(self, name, grid, options):
        super().__init__(name, grid, options)
        self.scoped_counts = {}   # id(prototypes) -> run_scoped allocations so far

    # Ordering across the cores (mpmd_map/c7): a DMA's accesses are this core's, made
    # when it starts; a signal releases, a completed wait acquires.
    def dma_started(self, src, src_index, dst, dst_index, sems) -> None:
        order = self.mesh.order
        if order is None:
            return
        me = self.mesh.member[self.core]
        order.access(me, src, src_index, "read", how="DMA ")
        order.access(me, dst, dst_index, "write", how="DMA ")
        for sem in sems:
            order.publish(me, id(sem[0]))

    def signalled(self, ref) -> None:
        if self.mesh.order is not None:
            self.mesh.order.publish(self.mesh.member[self.core], id(ref))

    def waited(self, ref) -> None:
        if self.mesh.order is not None:
            self.mesh.order.acquire(self.mesh.member[self.core], id(ref))

    def allocate_scoped(self, prototypes, collective_axes) -> list:
        if collective_axes or self.devices is not None:
            return super().allocate_scoped(prototypes, collective_axes)
        n = self.scoped_counts.get(id(prototypes), 0)
        self.scoped_counts[id(prototypes)] = n + 1
        refs = self.mesh.scoped((id(prototypes), n), self.core, prototypes, self)
        if not any(_in_hbm(p) for p in prototypes):
            return refs
        # HBM in run_scoped (JAX's interpreter's extension, pallas_call/c19): one buffer of the
        # device, shared by its cores as JAX's interpreter shares it (params.py).
        shared = self.mesh.scoped((id(prototypes), n), "device", prototypes, self)
        return [s if _in_hbm(p) else r for r, s, p in zip(refs, shared, prototypes)]


def _in_hbm(prototype) -> bool:
    return prototype.kind in ("scratch (hbm)", "scratch (any)")


class MeshState:
    """What the cores of one mesh kernel share: each core's buffers (for signals addressed to
    another core); under detect_races, what orders their accesses (``order``, by core index
    ``member``: interp.pallas.devices.DeviceAccesses)."""

    def __init__(self, axes, sizes):
        self.axes, self.sizes = axes, sizes
        self.order = None     # DeviceAccesses over the cores (detect_races, several cores)
        self.member = {}      # core point -> its index in ``order``
        self.slots = {}    # id(core-local ref) -> slot index
        self.locals = {}   # core point -> [refs]
        self.barriers = {}
        self.globals = {}   # get_global buffers by equation, shared by the cores
        self.scoped_refs = {}   # (id(prototypes), occurrence) -> {core: [refs]}
        self.scoped_slots = {}  # id(scoped ref) -> (key, position, prototypes)
        self.runs = {}          # core point -> its CoreRun

    def scoped(self, key, core, prototypes, run) -> list:
        """The refs of run_scoped allocation ``key`` on ``core``: made when the core enters the
        run_scoped, or earlier when another core signals into it (Mosaic TPU allocates a
        run_scoped's semaphores in the kernel's frame, mosaic/lowering.py
        _run_scoped_lowering_rule: tpu.sem_alloc in a tpu.region, so a signal may land before
        the core enters the region)."""
        per_core = self.scoped_refs.setdefault(key, {})
        refs = per_core.get(core)
        if refs is None:
            refs = per_core[core] = [p.fresh(run) for p in prototypes]
            for i, r in enumerate(refs):
                self.scoped_slots[id(r)] = (key, i, prototypes)
        return refs

    def register(self, locals_):
        self.locals = locals_
        for refs in locals_.values():
            for i, r in enumerate(refs):
                self.slots[id(r)] = i

    def core_of(self, axes: dict, here):
        """The core a dict {core axis: index} names, relative to core ``here`` (unnamed axes
        keep its coordinate), or None."""
        point = dict(zip(self.axes, here))
        for k, v in axes.items():
            names = k if isinstance(k, tuple) else (k,)
            if len(names) != 1 or names[0] not in point:
                return None
            point[names[0]] = int(v)
        target = tuple(point[a] for a in self.axes)
        return target if target in self.locals else None

    def counterpart(self, ref, core):
        """The buffer on ``core`` that corresponds to this core's ``ref`` (itself if shared)."""
        for here, barrier in self.barriers.items():
            if ref is barrier:
                return self.barriers[core]
        scoped = self.scoped_slots.get(id(ref))
        if scoped is not None:
            key, i, prototypes = scoped
            return self.scoped(key, core, prototypes, self.runs[core])[i]
        slot = self.slots.get(id(ref))
        return ref if slot is None else self.locals[core][slot]
