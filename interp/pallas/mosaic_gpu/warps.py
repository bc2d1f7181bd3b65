"""The warps of a warpgroup: ``plgpu.warp_map`` (an ``mpmd_map`` over a ``WarpMesh``; JAX
0.10.2: ``core_map``), a fork/join of the warpgroup's 4 warps run as cores of the schedule."""
from __future__ import annotations

import functools

from ...errors import UndefinedBehaviorError
from ...evaluator import get_plan, split_jaxpr
from ...schedule import run_cores
from ..grid import maybe_current_run
from . import tma
from .errors import DeadlockError
from .races import join
from .warpgroup import WarpgroupRun


class WarpRun(WarpgroupRun):
    """One warp of a warpgroup inside ``plgpu.warp_map`` (an ``mpmd_map`` over a WarpMesh):
    warps run concurrently with each other and with the other warpgroups. A warp starts each
    warp_map knowing what its warpgroup knows and having waited what it waited (the warpgroup's
    threads are the warps'); the warpgroup learns what every warp observed when they join."""

    __slots__ = ("parent",)

    def __init__(self, parent, warp):
        super().__init__(parent.name, parent.grid, parent.options, parent.cluster, parent.block,
                         parent.warpgroup)
        self.parent, self.warp = parent, warp
        self.core = (parent.core, "warp", warp)
        self.tracker, self.program_ids = parent.tracker, parent.program_ids
        self.kernel_grid = parent.kernel_grid
        self.devices, self.device_rank = parent.devices, parent.device_rank   # (Launch.enter)

    def where(self) -> str:
        return f"{super().where()}, warp {self.warp}"


class _WarpMeshState:
    def __init__(self, axes, sizes):
        self.axes, self.sizes = axes, sizes


class WarpMapPlan:
    """``mpmd_map`` over a ``WarpMesh`` inside a Mosaic GPU kernel (``plgpu.warp_map``): a
    fork/join of the warpgroup's 4 warps (lowering.py _mpmd_map_lowering_rule: "a fork/join over
    individual warps in a warpgroup"), each running the body with its warp id."""
    NUM_WARPS = 4

    def __init__(self, eqn):
        p = eqn.params
        if len(p["meshes"]) != 1:
            raise eqn.unsupported("warp_map with several meshes")
        self.axis_name = p["meshes"][0].axis_name
        jaxpr, self.consts = split_jaxpr(p["jaxprs"][0])
        self.plan = get_plan(jaxpr, eqn.options)

    def run(self, args):
        parent = maybe_current_run()
        if not isinstance(parent, WarpgroupRun) or isinstance(parent, WarpRun):
            raise UndefinedBehaviorError("warp_map outside a Mosaic GPU warpgroup (or nested in "
                                         "another warp_map: Mosaic GPU refuses to lower it)")
        cluster = parent.cluster
        mesh = _WarpMeshState(tuple(cluster.axes) + (self.axis_name,),
                              tuple(cluster.sizes) + (self.NUM_WARPS,))
        warps = {}
        # The fork and the join order the warpgroup's accesses before and after the warps' (a
        # warpgroup barrier): each is a release, so what was written before it is known after.
        forked = parent.release()
        for w in range(self.NUM_WARPS):
            warp = parent.warps.get(w)
            if warp is None:
                warp = parent.warps[w] = WarpRun(parent, w)
            join(warp.known, forked)
            join(warp.tensor_known, parent.tensor_known)
            # the warpgroup's phase of each barrier, except where its warps diverged (then each
            # warp keeps the phase it observed)
            for b, phase in parent.waits.items():
                if b not in parent.diverged:
                    warp.waits[b] = phase
            warp.mesh = mesh
            warp.point = {**parent.point, self.axis_name: w}
            warps[warp.core] = warp

        def body(warp):
            with warp:
                self._run_body(args)
                if warp.pending is not None:
                    warp.raise_pending()

        bodies = {core: functools.partial(body, warp) for core, warp in warps.items()}
        cluster.concurrent = True   # the warps' SMEM accesses are checked as concurrent ones
        run_cores(bodies, parent.label, deadlock=DeadlockError)
        for warp in warps.values():   # the join: a warpgroup barrier after the warps
            join(parent.known, warp.release())
            join(parent.tensor_known, warp.tensor_known)
            tma.hand_over_stores(warp, parent)
        _join_phases(parent, list(warps.values()))
        return []

    def _run_body(self, args) -> None:
        self.plan.run(self.consts, list(args))


def _join_phases(parent, warps) -> None:
    """The barrier phases the warps observed become the warpgroup's: Mosaic GPU tracks a
    barrier's phase parity per thread, and a warpgroup's wait is its warps' waits (PTX
    mbarrier.try_wait.parity per thread). Where the warps observed different phases, the
    warpgroup's next wait on that barrier waits on different parities in its warps: undefined
    (``WarpgroupRun.wait_barrier`` raises BarrierError naming the phases)."""
    for b in {b for w in warps for b in w.waits}:
        phases = [w.waits.get(b, parent.waits.get(b, 0)) for w in warps]
        parent.waits[b] = max(phases)
        if len(set(phases)) == 1:
            parent.diverged.pop(b, None)
        else:
            parent.diverged[b] = phases


class CoreMapWarpPlan(WarpMapPlan):
    """JAX 0.10.2's ``plgpu.warp_map``: ``core_map`` over a ``WarpMesh`` (pallas/core.py
    core_map_p; from 0.11 it binds ``mpmd_map``). The body closes over the warpgroup's refs and
    scalars: the equation's operands are its jaxpr's constvars, and it has no invars (0.10.2's
    lowering.py _core_map_lowering_rule lowers it with ``args=(), consts=args``)."""

    def __init__(self, eqn):
        jaxpr = eqn.params["jaxpr"]
        if jaxpr.invars:
            raise eqn.unsupported("core_map over a WarpMesh with scratch_shapes (0.10.2's Mosaic "
                                  "GPU lowering passes the body no arguments)")
        self.axis_name = eqn.params["mesh"].axis_name
        self.plan = get_plan(jaxpr, eqn.options)

    def _run_body(self, args) -> None:
        self.plan.run(list(args), [])
