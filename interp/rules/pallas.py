"""Rules: Pallas (pallas_call, kernels over a mesh, and the kernel-body primitives every dialect
shares: grid queries, semaphores, run_scoped, get_global, masked accesses, hints).

The engine lives in ``interp.pallas`` (its dialects' engines in ``interp.pallas.tpu`` and
``interp.pallas.mosaic_gpu``); these rules are thin. Ref accesses go through the shared
Ref contract (``interp.refs``): the indexer/transform normalisation is the state family's
(``interp.pallas.indexing.resolve`` delegates to it), never a second copy here.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from ..pallas import indexing
from ..pallas.grid import CallPlan, current_run, maybe_current_run
from ..pallas.tpu.mesh import MeshPlan
from ..pallas.mosaic_gpu.launch import GpuMeshPlan, allocate_scratch, is_gpu_mesh, is_warp_mesh
from ..pallas.mosaic_gpu.warps import CoreMapWarpPlan, WarpMapPlan
from ..errors import UndefinedBehaviorError
from ..registry import RULES, register

_call_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@register("pallas_call", partial="Indirect block dimensions in pallas_call's own BlockSpecs "
                                 "(index maps return scalars there and no lowering defines "
                                 "them; Indirect in emit_pipeline is supported), block "
                                 "transforms (Mosaic GPU tiling/swizzle), extended-dtype "
                                 "operands other than typed PRNG keys, pallas_call "
                                 "over a mesh and custom grid environments are unsupported")
def pallas_call(eqn, *args, jaxpr, grid_mapping, out_avals, input_output_aliases, mesh, interpret,
                debug, compiler_params, cost_estimate, name, metadata, kernel_arg_transforms=None):
    # CallPlan reads the parameters that define the kernel's meaning from eqn.params (jaxpr,
    # grid_mapping, out_avals, input_output_aliases, mesh, and compiler_params' dimension
    # semantics: interp/pallas/grid.py). The other compiler parameters steer a compiler (warps,
    # VMEM limits, approximate math that a compliance mode measures), and interpret, debug,
    # cost_estimate, name and metadata tracing, lowering and profiling: the reference runs a
    # kernel whatever they say. kernel_arg_transforms (JAX 0.12, under InterpretGPUParams only)
    # tells JAX's GPU interpreter how the operand buffers are laid out: the kernel was traced with
    # those transforms applied to its refs (pallas_call.py _trace_kernel_to_jaxpr:
    # wrap_with_transforms), so the jaxpr already holds them.
    return call_plan(eqn).run(args)


def call_plan(eqn) -> CallPlan:
    """The plan of a pallas_call equation (built once), its scratch allocated as the kernel's
    dialect allocates it (Mosaic GPU's barriers and accumulators by its engine, other kinds by
    the core's)."""
    return _plan(eqn, lambda eqn: CallPlan(eqn, allocate_scratch))


def _plan(eqn, cls):
    # The plan (block specs, index-map plans, kernel plan) is built once per equation.
    plan = _call_plans.get(eqn)
    if plan is None:
        plan = _call_plans[eqn] = cls(eqn)
    return plan


@register("mpmd_map", partial="one mesh (no MPMD body lists / external meshes); no DMAs to "
                              "another core's memory outside a shard_map body (inside one, remote "
                              "DMAs name a device and a core: spec/spmd.py remote-dma/core-target)")
def mpmd_map(eqn, *args, jaxprs, meshes, external_meshes, out_avals, input_output_aliases,
             compiler_params, interpret, debug, cost_estimate, name, metadata):
    # pl.kernel / core_map over a core mesh; plgpu.kernel over a Mosaic GPU mesh. The mesh plan
    # reads its parameters from eqn.params (interp/pallas/mesh.py MeshKernel); interpret, debug,
    # cost_estimate, name and metadata only steer tracing, lowering and profiling.
    return _plan(eqn, _mesh_plan_class(meshes)).run(args)


def _mesh_plan_class(meshes):
    """The dialect's plan of an ``mpmd_map``: Mosaic GPU's ``warp_map`` (a WarpMesh inside a
    kernel) or ``plgpu.kernel`` (grid, cluster, warpgroups), else a TPU core mesh."""
    mesh = meshes[0] if meshes else None
    if is_warp_mesh(mesh):
        return WarpMapPlan
    return GpuMeshPlan if mesh is not None and is_gpu_mesh(mesh) else MeshPlan


@register("core_map", partial="over a WarpMesh with scratch_shapes refused (JAX 0.10.2's Mosaic "
                              "GPU lowering passes the body no arguments); other meshes run as "
                              "JAX discharges them (an mpmd_map, with that rule's limits), a "
                              "mesh JAX has no discharge rule for is refused")
def core_map(eqn, *operands, jaxpr, mesh, debug_info, compiler_params, interpret, debug,
             cost_estimate, name, metadata):
    # JAX 0.10.2 only: pl.core_map and plgpu.warp_map bind core_map_p (pallas/core.py), a
    # ref-effectful primitive whose body closes over refs (the operands are its jaxpr's
    # constvars, its invars the scratch_shapes); from 0.11 both bind mpmd_map. debug_info,
    # interpret, debug, cost_estimate, name and metadata only steer tracing, lowering and
    # profiling; compiler_params and mesh go into the discharged mpmd_map.
    if is_warp_mesh(mesh):
        return _plan(eqn, CoreMapWarpPlan).run(operands)
    return _plan(eqn, _DischargedCoreMap).run(operands)


class _DischargedCoreMap:
    """``core_map`` over a mesh outside a kernel: its meaning is JAX's own discharge
    (pallas/core.py _core_map_discharge_rule: default_mesh_discharge_rule for TPU core meshes,
    mosaic_gpu/core.py _gpu_mesh_discharge_rule for plgpu.Mesh): an ``mpmd_map`` over the mesh
    whose outputs alias the refs the body writes. Traced once per equation; each run reads the
    operand refs, evaluates the discharged jaxpr (so the mpmd_map rule runs the kernel) and
    writes the refs' final values back."""

    def __init__(self, eqn):
        from jax._src import api_util, core as jax_core, linear_util as lu
        from jax._src.interpreters import partial_eval as pe
        from jax._src.pallas import core as pallas_core
        from jax._src.state import discharge
        mesh = eqn.params["mesh"]
        if type(mesh) not in pallas_core._core_map_mesh_rules:
            raise eqn.unsupported(f"core_map over {type(mesh).__name__}: JAX has no discharge "
                                  f"rule for it (only its compiler lowers it in place)")

        def bind(*operands):
            return eqn.primitive.bind(*operands, **eqn.params)

        avals = list(eqn.in_avals)
        info = api_util.debug_info("core_map", bind, tuple(avals), {})
        traced, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(bind, debug_info=info), avals)
        # (0.10.2's discharge_state takes and returns a ClosedJaxpr; core_map_p has no later
        # version in range.)
        self.closed = discharge.discharge_state(jax_core.ClosedJaxpr(traced, consts))
        self.is_ref = [hasattr(a, "inner_aval") for a in avals]
        self.eqn = eqn

    def run(self, operands):
        values = [np.array(op.array, copy=True) if is_ref else op
                  for op, is_ref in zip(operands, self.is_ref)]
        finals = self.eqn.eval_jaxpr(self.closed, *values)
        refs = [op for op, is_ref in zip(operands, self.is_ref) if is_ref]
        for ref, final in zip(refs, finals):   # one final value per ref operand, in order
            ref.write(tuple(slice(0, d, 1) for d in ref.shape), final)
        return []


def _axis_index(eqn, *, axis_name):
    idx = kernel_axis_index(maybe_current_run(), axis_name)
    if idx is None:
        raise eqn.unsupported(f"axis_index of {axis_name!r} outside a Pallas core mesh or a "
                              "pallas_call grid that names it")
    return idx


def kernel_axis_index(run, axis_name) -> "np.int32 | None":
    """lax.axis_index of axes of the running kernel: its core mesh's, or its grid's named axes
    (``grid=(("foo", 2), ...)``: the grid index along that axis, vmapped axes counted as Mosaic's
    lowering counts them, mosaic/lowering.py _axis_index_rule); None when they are not the
    kernel's. Several names: the row-major linear index over them (jax.lax.axis_index)."""
    if run is None:
        return None
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    mesh = run.mesh
    if mesh is not None and all(n in mesh.axes for n in names):
        sizes, point = dict(zip(mesh.axes, mesh.sizes)), run.point
    elif run.grid_names and all(n in run.grid_names for n in names):
        sizes = dict(zip(run.grid_names, run.grid))
        point = dict(zip(run.grid_names, run.point))
    else:
        return None
    idx = 0
    for n in names:
        idx = idx * sizes[n] + point[n]
    return np.int32(idx)


if "axis_index" not in RULES:  # collective axis_index outside kernels belongs to no family yet
    register("axis_index", partial="only inside Pallas core-mesh kernels (pl.kernel / core_map)")(
        _axis_index)


# -- grid ----------------------------------------------------------------------------------------

@register("program_id")
def program_id(eqn, *, axis):
    return np.int32(current_run().program_ids[axis])


@register("num_programs")
def num_programs(eqn, *, axis):
    return np.int32(current_run().kernel_grid[axis])


# -- hints and timing: no effect on values ----------------------------------------------------
# (pl.debug_print binds JAX's debug_print, whose rule is in control_flow)

@register("multiple_of")
def multiple_of(eqn, x, *, values):
    # A promise, not a conversion: "asserting x is a multiple of N when it is not can result in
    # undefined behavior" (primitives.py multiple_of; Mosaic lowers it to tpu.assume_multiple of
    # each value). Checked on scalars; on vectors Triton reads the values per dimension
    # (tt.divisibility of contiguous runs), which no elementwise test states.
    if np.ndim(x) == 0 and np.asarray(x).dtype.kind in "iu":
        v = int(x)
        for m in values:
            if v % int(m):
                run = maybe_current_run()
                where = run.where() if run is not None else "outside a kernel"
                raise UndefinedBehaviorError(f"{where}: multiple_of: {v} is not a multiple of "
                                             f"{m} (a false hint is undefined behaviour)")
    return x


@register("delay")
def delay(eqn, nanos):
    return []


# -- masked loads and stores ---------------------------------------------------------------------

@register("masked_load")
def masked_load(eqn, *flat, args_tree, eviction_policy, cache_modifier, is_volatile):
    # eviction_policy, cache_modifier and is_volatile are Triton cache hints, not values
    ref, transforms, mask, other = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    if mask is None:
        out = target.read(index)
    else:
        out = target.masked_read(index, mask, other)
    return np.asarray(out).reshape(eqn.out_aval.shape)


@register("masked_swap")
def masked_swap(eqn, *flat, args_tree, eviction_policy):
    # eviction_policy is a Triton cache hint, not a value
    ref, transforms, val, mask = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    if mask is None:
        old = target.read(index)
        target.write(index, val)
    else:
        old = target.masked_write(index, val, mask)
        # Masked-off lanes return val: JAX's discharge rule (primitives.py _swap_discharge_rule:
        # where(mask, old, val)), its TPU interpret mode and Triton's lowering (a load with
        # other=val: triton/lowering.py _masked_swap_lowering_rule) all define them so.
        lanes = np.broadcast_to(np.asarray(mask, bool), old.shape)
        old = np.where(lanes, old, np.broadcast_to(np.asarray(val, old.dtype), old.shape))
    return np.asarray(old).reshape(eqn.out_aval.shape)


def _target(eqn, ref, transforms):
    """(ref, normalized index) of a masked / atomic access (no bitcast views for these)."""
    target, index, dtype = indexing.resolve(eqn, ref, transforms)
    if dtype != target.dtype:
        raise eqn.unsupported(f"masked access through a bitcast view ({target.dtype} as {dtype})")
    return target, index


# -- scoped allocation ---------------------------------------------------------------------------

@register("run_scoped", partial="collective_axes (shared allocations) only over the warpgroups "
                                "of a Mosaic GPU block")
def run_scoped(eqn, *consts, jaxpr, collective_axes=(), ref_transforms=None):
    # ref_transforms: the transforms the body already applies to its allocations (JAX traces the
    # body with them: primitives.py wrap_with_transforms); they tell a lowering how to lay the
    # allocation out.
    plan = eqn.plan(jaxpr)
    return _run_scoped(plan, consts, _scoped_prototypes(plan, len(consts), eqn.options),
                       collective_axes)


def _scoped_prototypes(plan, n_consts: int, options) -> list:
    """The body's allocations, allocated once (copied per entry, as pallas_call's scratch)."""
    inner = plan.jaxpr
    n_alloc = len(inner.invars) - (0 if len(inner.constvars) == n_consts else n_consts)
    # (any dialect's kinds: run_scoped allocates Mosaic GPU barriers and accumulators too)
    return [allocate_scratch(v.aval, f"run_scoped allocation {i}", None, options)
            for i, v in enumerate(inner.invars[len(inner.invars) - n_alloc:])]


def _run_scoped(plan, consts, prototypes, collective_axes=()) -> list:
    run = current_run()
    refs = run.allocate_scoped(prototypes, collective_axes)
    try:
        if len(plan.jaxpr.constvars) == len(consts):   # the operands are the body's constvars
            outs = plan.run(list(consts), refs)
        else:                                          # the body takes them as leading invars
            outs = plan.run([], list(consts) + refs)
    finally:
        run.leave_scope(refs)
    run.check_scope_exit(refs)
    return outs


def _prepare_run_scoped(ctx):
    """Plan time: the body's plan and allocation prototypes once per equation."""
    plan = ctx.plan(ctx.params["jaxpr"])
    prototypes = _scoped_prototypes(plan, len(ctx.eqn.invars), ctx.options)
    axes = tuple(ctx.params.get("collective_axes") or ())
    return lambda eqn, *consts, jaxpr, collective_axes=(), ref_transforms=None: \
        _run_scoped(plan, consts, prototypes, axes)


run_scoped.prepare = _prepare_run_scoped


# -- ref operands of DMA / semaphore primitives ---------------------------------------------------

class _Operands:
    """Where the refs of one equation sit among its flat operands, and what the rule derives from
    the values of its scalar index operands, kept per tuple of those values.

    DMA and semaphore primitives take a pytree (refs, TransformedRefs, NDIndexers, Slices);
    unflattening it and normalising the indexers every grid step costs more than a small copy
    or a semaphore update. The structure is fixed per equation: unflattened once with operand
    positions as leaves, it tells where the refs are; every other operand (index leaves, scalar
    values) is a scalar whose value keys the cache. Normalised indices, checks and byte counts
    are functions of those values and the equation's ref shapes, so they are computed once per
    tuple of values. Operands that are not scalars (Indirect index vectors), or structures
    ``refs_of`` does not take, keep the generic path (``ref_pos`` None)."""
    MAX_CACHED = 1 << 12

    def __init__(self, ctx, tree, refs_of):
        self.cache: dict = {}
        self.ref_pos = self.parts = None
        n = len(ctx.in_avals)
        try:
            parts = tree.unflatten(list(range(n)))
            pairs = refs_of(parts)
        except Exception:  # noqa: BLE001 - a pytree node that validates its leaves: generic path
            return
        if pairs is None:
            return
        ref_pos = [None if pair is None else pair[0] for pair in pairs]
        if not all(p is None or isinstance(p, int) for p in ref_pos):
            return
        # Every other operand is part of the key (index leaves and scalar values alike: which
        # leaves a Slice keeps static cannot be told from placeholders).
        key_pos = [i for i in range(n) if i not in ref_pos]
        for i in key_pos:
            aval = ctx.in_avals[i]
            if (type(aval).__name__ != "ShapedArray" or aval.shape != ()
                    or np.dtype(aval.dtype).kind not in "iub"):
                return
        self.parts, self.ref_pos, self.key_pos = parts, ref_pos, key_pos

    def lookup(self, flat, derive):
        """(what ``derive()`` gave for these index values, the refs in ``flat``)."""
        key = tuple([int(flat[i]) for i in self.key_pos])
        hit = self.cache.get(key)
        if hit is None:
            hit = derive()
            if len(self.cache) < self.MAX_CACHED:
                self.cache[key] = hit
        return hit, [None if p is None else flat[p] for p in self.ref_pos]


def _with_operands(tree_param, refs_of):
    """A rule's per-equation ``prepare``: the rule gets its equation's :class:`_Operands`."""
    def deco(rule):
        def prepare(ctx):
            # (a partial: the keyword merge happens in C, one Python frame less per call)
            return functools.partial(rule, _operands=_Operands(ctx, ctx.params[tree_param],
                                                               refs_of))

        def direct(eqn, *flat, _operands=None, **params):   # called without a plan
            if _operands is None:
                _operands = _Operands(eqn, params[tree_param], refs_of)
            return rule(eqn, *flat, _operands=_operands, **params)
        direct.prepare = prepare
        direct.__name__ = rule.__name__
        direct.__wrapped__ = rule   # its signature is the rule's (evaluator.check_params)
        return direct
    return deco


# -- semaphores ----------------------------------------------------------------------------------

def _sem(eqn, ref, transforms):
    target, index, _ = indexing.resolve(eqn, ref, transforms)
    if getattr(target, "kind", None) != "semaphore":
        raise eqn.unsupported(f"semaphore operation on a non-semaphore buffer {target!r}")
    target.check_index(index)
    return target, index


def _sem_refs(parts):
    if len(parts) >= 5 and (parts[3] is not None or parts[4] is not None):
        return None  # a signal to another core: the generic path
    return [(parts[0], parts[1])]


def _sem_operand(eqn, flat, args_tree, operands):
    """((semaphore ref, index), [the values of the other top-level parts]) of a semaphore
    primitive: the same on the cached path (index per tuple of scalar operand values, the other
    parts single leaves) and the generic one."""
    if operands.ref_pos is None:
        parts = args_tree.unflatten(flat)
        return _sem(eqn, parts[0], parts[1]), parts[2:]

    def derive():
        parts = args_tree.unflatten(flat)
        return _sem(eqn, parts[0], parts[1])[1]
    index, (ref,) = operands.lookup(flat, derive)
    return (ref, index), [None if p is None else flat[p] for p in operands.parts[2:]]


@register("semaphore_signal")
@_with_operands("args_tree", _sem_refs)
def semaphore_signal(eqn, *flat, args_tree, device_id_type=None, memory_scope=None,
                     _operands=None):
    # memory_scope: Mosaic GPU's own semaphore_signal (same name, spec/pallas_mosaic_gpu.py
    # "semaphore-names"): the scope of the atomic, no value effect.
    run = current_run()
    (target, index), (inc, device_id, core_index) = _sem_operand(eqn, flat, args_tree, _operands)
    devices = run.devices
    if devices is not None and devices.of_core_mesh(run) and (device_id is not None
                                                               or core_index is not None):
        # A TPU core-mesh kernel in a shard_map body: a signal to a core of this or another
        # device's kernel (interp.pallas.devices DeviceKernels.address).
        other = devices.address(run, device_id, device_id_type, eqn.name, core_index=core_index,
                                same_core=False)
        target = devices.counterpart(run, target, other, "semaphore_signal")
    elif device_id is not None and core_index is None and devices is not None and \
            not _names_cores(run, device_id):
        # A signal to another device of the enclosing shard_map (interp.pallas.devices).
        other = devices.target(run, device_id, device_id_type, eqn.name)
        target = devices.counterpart(run, target, other, "semaphore_signal")
    elif device_id is not None or core_index is not None:
        # A signal to another core of this kernel's core mesh: its copy of the semaphore.
        target = run.mesh.counterpart(target, _signalled_core(eqn, run, device_id,
                                                              device_id_type, core_index))
    run.dma.signal((target, index), inc)
    return []


def _names_cores(run, device_id) -> bool:
    """Whether a device_id dict names the core axes of this kernel's mesh (Mosaic GPU)."""
    return (run.mesh is not None and isinstance(device_id, dict)
            and all(k in run.mesh.axes for k in device_id))


def _signalled_core(eqn, run, device_id, device_id_type, core_index):
    """The core of this kernel's mesh a signal names. Only a MESH-type dict names cores (by core
    axis); a logical id or mesh coordinates name devices (primitives.py device_id_to_logical)."""
    core = None
    if run.mesh is not None and device_id is None:
        core = run.mesh.core_of({run.mesh.axes[0]: core_index}, run.core)
    elif (run.mesh is not None and isinstance(device_id, dict) and core_index is None
          and getattr(device_id_type, "name", "MESH") == "MESH"):
        core = run.mesh.core_of(device_id, run.core)
    if core is None:
        raise eqn.unsupported(f"semaphore_signal to device {device_id!r} ({device_id_type}) / "
                              f"core {core_index!r}: outside a shard_map body only the cores of "
                              "a core-mesh kernel, named by a dict of its core axes or "
                              "core_index, can be signalled")
    return core


@register("semaphore_wait")
@_with_operands("args_tree", _sem_refs)
def semaphore_wait(eqn, *flat, args_tree, memory_scope=None, _operands=None):
    # memory_scope: as semaphore_signal.
    sem, (value, *rest) = _sem_operand(eqn, flat, args_tree, _operands)
    decrement = rest[0] if rest else True
    current_run().dma.wait(sem, value, decrement=decrement is None or bool(decrement))
    return []


@register("semaphore_read")
@_with_operands("args_tree", _sem_refs)
def semaphore_read(eqn, *flat, args_tree, _operands=None):
    sem, _ = _sem_operand(eqn, flat, args_tree, _operands)
    return np.asarray(current_run().dma.read_sem(sem)).astype(eqn.out_dtype)


# -- other kernel-body primitives ----------------------------------------------------------------

@register("reciprocal")
def reciprocal(eqn, x, *, approx=False, full_range=True):
    # 1/x correctly rounded (computed wide, rounded once). approx=True lets hardware return an
    # approximation (Mosaic: a bf16 reciprocal); the reference gives the exact result and the
    # compliance mode of approx reciprocals says how far a backend may be.
    from ..dtypes import finfo, wide_float
    x = np.asarray(x)
    w = wide_float(x.dtype)
    xw = x.astype(w)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = (np.asarray(1, w) / xw).astype(x.dtype)
    if not full_range:
        # "may produce incorrect results when x or output is +-inf or NaN; or when x is
        # +-1/flt_min or +-0" (primitives.py reciprocal): those elements are undefined, so they
        # are NaN (like never-written memory: a use shows in the results). |x| >= 1/tiny: the
        # result is at most the smallest normal.
        ax = np.abs(xw)
        undefined = ~(np.isfinite(out.astype(w)) & (ax > 0) & (ax < 1 / w.type(finfo(x.dtype).tiny)))
        if undefined.any():
            out = np.where(undefined, np.asarray(np.nan, x.dtype), out)
    return out


@register("add_dependency", "trace_value")
def no_value_effect(eqn, *args, label=None):
    # Synchronisation / scheduling / tracing markers: nothing observable in values.
    return [] if eqn.primitive.multiple_results else (args[0] if args else [])




@register("get_global")
def get_global(eqn, *, what):
    # One buffer per get_global equation for the whole call: every grid step (and every core of a
    # core mesh) sees the same one. JAX's interpret mode cannot discharge it.
    run = current_run()
    owner = run.mesh if run.mesh is not None else run
    ref = owner.globals.get(eqn)
    if ref is None:
        ref = owner.globals[eqn] = allocate_scratch(what, "global", run, run.options)
    return ref
