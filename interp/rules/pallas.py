"""Rules: Pallas (pallas_call and the primitives of kernel bodies; TPU DMAs and semaphores).

The engine lives in ``interp.pallas``; these rules are thin. Ref accesses go through the shared
Ref contract (``interp.refs``): the indexer/transform normalisation is the state family's
(``interp.pallas.indexing.resolve`` delegates to it), never a second copy here.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from ..pallas import indexing
from ..pallas.grid import CallPlan, MeshPlan, _alloc_scratch, current_run, maybe_current_run
from ..pallas.dma import view_bytes
from ..pallas.memory import KernelRef
from ..errors import UndefinedBehaviorError
from ..registry import RULES, register

_call_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@register("pallas_call", partial="Indirect block dimensions in pallas_call's own BlockSpecs "
                                 "(index maps return scalars there and no lowering defines "
                                 "them; Indirect in emit_pipeline is supported), block "
                                 "transforms (Mosaic GPU tiling/swizzle), extended-dtype "
                                 "operands other than typed PRNG keys, pallas_call "
                                 "over a mesh and custom grid environments are unsupported")
def pallas_call(eqn, *args, **params):
    return _plan(eqn, CallPlan).run(args)


def _plan(eqn, cls):
    # The plan (block specs, index-map plans, kernel plan) is built once per equation.
    plan = _call_plans.get(eqn)
    if plan is None:
        plan = _call_plans[eqn] = cls(eqn)
    return plan


@register("mpmd_map", partial="one mesh (no MPMD body lists / external meshes); no DMAs to "
                              "another core's memory")
def mpmd_map(eqn, *args, **params):
    # pl.kernel / core_map over a core mesh.
    return _plan(eqn, MeshPlan).run(args)


def _axis_index(eqn, *, axis_name):
    run = maybe_current_run()
    mesh = run.mesh if run is not None else None
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    if mesh is None or not all(n in mesh.axes for n in names):
        raise eqn.unsupported(f"axis_index of {axis_name!r} outside a Pallas core mesh")
    # Several names: the row-major linear index over them (jax.lax.axis_index semantics).
    sizes = dict(zip(mesh.axes, mesh.sizes))
    idx = 0
    for n in names:
        idx = idx * sizes[n] + run.point[n]
    return np.int32(idx)


if "axis_index" not in RULES:  # collective axis_index outside kernels belongs to no family yet
    register("axis_index", partial="only inside Pallas core-mesh kernels (pl.kernel / core_map)")(
        _axis_index)


# -- emit_pipeline as a primitive (jax_use_emit_pipeline_primitive=True) -------------------------
# pltpu.emit_pipeline binds emit_pipeline (and, in its expansion, pipeline_body for the body)
# when jax_use_emit_pipeline_primitive is set. Its meaning is its expansion: JAX 0.12's
# pipeline.emit_pipeline_to_jaxpr (what the Mosaic lowering and the TPU interpret mode run) traces
# the same DMA pipeline the default path inlines, calling pipeline_body per step. The body sees
# the pipeline step as program_id(0..P-1) and the pipeline grid as num_programs(0..P-1), the
# enclosing kernel's axes after them (lowering.py: user_grid_indices / grid_sizes concatenated).

_pipeline_jaxprs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _pipeline_expansion():
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
    return getattr(mosaic_pipeline, "emit_pipeline_to_jaxpr", None)


def emit_pipeline(eqn, *args, grid_mapping, args_tree, core_axis=None, **params):
    expand = _pipeline_expansion()
    if expand is None or "refs_tree" not in params:
        raise eqn.unsupported("this JAX expands emit_pipeline only inside its Mosaic lowering "
                              "rule (no pipeline.emit_pipeline_to_jaxpr): nothing defines it "
                              "outside TPU compilation")
    if core_axis is not None:
        raise eqn.unsupported("core_axis (the lowering reads a grid size where the core index "
                              "belongs); use core_axis_name")
    run = current_run()
    outer = tuple(int(g) for g in run.kernel_grid)
    per_eqn = _pipeline_jaxprs.setdefault(eqn, {})
    closed = per_eqn.get(outer)
    if closed is None:
        with _tpu_target():
            closed = per_eqn[outer] = expand(
                list(eqn.in_avals), grid_mapping=grid_mapping, grid_names=None,
                grid_sizes=outer, args_tree=args_tree, core_axis=core_axis, **params)
    dynamic = iter(args_tree.unflatten(args).dynamic_grid_spec)
    grid = tuple(int(d) if isinstance(d, (int, np.integer)) else int(next(dynamic))
                 for d in grid_mapping.grid)
    vmapped = set(getattr(grid_mapping, "vmapped_dims", ()))
    grids = run.pipeline_grids
    grids.append(tuple(d for i, d in enumerate(grid) if i not in vmapped))
    try:
        eqn.eval_jaxpr(closed, *args)
    finally:
        grids.pop()
    return []


def abstract_tpu_mesh():
    """A one-core abstract mesh of a TPU v5e: what tracing a TPU kernel asks for off a TPU."""
    import jax
    from jax._src.mesh import AbstractDevice
    dev = AbstractDevice(device_kind="TPU v5 lite", num_cores=1, platform="tpu")
    return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=dev)


def _tpu_target():
    """The TPU the expansion is traced for: the caller's abstract mesh if it names one, else a
    TPU v5e core. The expansion asks the TPU generation only for buffer tiling (how scratch is
    laid out), which moves no value: results do not depend on the choice."""
    import contextlib
    import jax
    from jax._src import tpu_info
    try:
        tpu_info.get_tpu_info()
        return contextlib.nullcontext()
    except ValueError:
        return jax.sharding.use_abstract_mesh(abstract_tpu_mesh())


def pipeline_body(eqn, *args, jaxpr, in_tree, _explicit_indices=False, **params):
    import jax
    run = current_run()
    ps, consts, refs = in_tree.unflatten(args)
    index = tuple(int(i) for i in getattr(ps, "index", ps))   # 0.12 PipelineStep; else a tuple
    refs = [_body_ref(eqn, run, r) for r in refs]
    lead = jax.tree_util.tree_leaves(ps) if _explicit_indices else []
    grids = run.pipeline_grids
    grid = grids[-1] if grids else ()
    saved = run.program_ids, run.kernel_grid
    run.program_ids = index + tuple(saved[0])
    run.kernel_grid = tuple(grid) + tuple(saved[1])
    try:
        eqn.eval_jaxpr(jaxpr, *lead, *refs, consts=list(consts))
    finally:
        run.program_ids, run.kernel_grid = saved
    return []


# Registered where the installed JAX defines the expansion (pipeline.emit_pipeline_to_jaxpr:
# JAX >= 0.11). JAX 0.10.2 expands the primitive only inside its Mosaic lowering rule (both its
# interpret modes fail on it): unsupported there (spec/pallas.py UNSUPPORTED).
if _pipeline_expansion() is not None:
    register("emit_pipeline", partial="core_axis (use core_axis_name) unsupported")(emit_pipeline)
    register("pipeline_body", partial="body refs whose transforms are not basic indexing (a "
                                      "view of the buffer) are unsupported")(pipeline_body)


def _body_ref(eqn, run, x):
    """A body operand (a ref or a TransformedRef such as ``buffer.at[slot]``) as a kernel ref:
    a view of the buffer, so accesses, race checks and never-written tracking stay exact."""
    ref, transforms = indexing.split_transformed(x)
    if not transforms:
        return ref
    target, index, dtype = indexing.resolve(eqn, ref, transforms)
    if dtype != target.dtype or any(isinstance(i, np.ndarray) for i in index):
        raise eqn.unsupported(f"pipeline body operand {target!r} through transforms "
                              f"{transforms} (not a view of the buffer)")
    target.check_index(index)
    init = None if target.init is None else target.init[index]
    return KernelRef(target.array[index], target.name, run, init=init, kind=target.kind,
                     check_bounds=target.check_bounds)


# -- grid ----------------------------------------------------------------------------------------

@register("program_id")
def program_id(eqn, *, axis):
    return np.int32(current_run().program_ids[axis])


@register("num_programs")
def num_programs(eqn, *, axis):
    return np.int32(current_run().kernel_grid[axis])


# -- hints and timing: no effect on values ----------------------------------------------------
# (pl.debug_print binds JAX's debug_print, whose rule is in control_flow)

@register("max_contiguous")
def max_contiguous(eqn, x, *, values):
    # Triton's contiguity hint for vectors of indices; the value unchanged.
    return x


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


# -- debug checks --------------------------------------------------------------------------------
# pl.debug_check binds checkify's check[debug=True]. Mosaic TPU and Mosaic GPU lower it to a
# runtime assertion with the message when pl.enable_debug_checks is on at lowering time, and to
# nothing otherwise (lowering.py _check_lowering_rule); outside kernels it is a no-op until
# checkify discharges it. JAX's interpret modes never check it (measured on 0.10.2 and 0.12).

def kernel_debug_check(eqn, args, err_tree) -> list:
    """The rule of check[debug=True] (called by control_flow.check): inside a kernel with debug
    checks enabled (read when the kernel runs, as Mosaic reads it when it lowers), a failed
    condition raises JaxRuntimeError naming kernel, grid point and message."""
    import jax
    from jax._src.pallas import core as pallas_core
    run = maybe_current_run()
    if run is None or not pallas_core.debug_checks_enabled():
        return []
    exc = jax.tree_util.tree_unflatten(err_tree, list(args)).get_exception()
    if exc is not None:  # the message as Mosaic asserts it: the unformatted fmt_string
        message = getattr(exc, "fmt_string", None) or str(exc)
        raise jax.errors.JaxRuntimeError(f"{run.where()}: debug check failed: {message}")
    return []


# -- masked loads and stores ---------------------------------------------------------------------

@register("masked_load")
def masked_load(eqn, *flat, args_tree, **params):
    ref, transforms, mask, other = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    if mask is None:
        out = target.read(index)
    else:
        out = target.masked_read(index, mask, other)
    return np.asarray(out).reshape(eqn.out_aval.shape)


@register("masked_swap")
def masked_swap(eqn, *flat, args_tree, **params):
    ref, transforms, val, mask = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    if mask is None:
        old = target.read(index)
        target.write(index, val)
    else:
        old = target.masked_write(index, val, mask)
    return np.asarray(old).reshape(eqn.out_aval.shape)


def _target(eqn, ref, transforms):
    """(ref, normalized index) of a masked / atomic access (no bitcast views for these)."""
    target, index, dtype = indexing.resolve(eqn, ref, transforms)
    if dtype != target.dtype:
        raise eqn.unsupported(f"masked access through a bitcast view ({target.dtype} as {dtype})")
    return target, index


# -- scoped allocation ---------------------------------------------------------------------------

@register("run_scoped", partial="collective_axes (cross-core shared allocations) unsupported")
def run_scoped(eqn, *consts, jaxpr, collective_axes=(), **params):
    if collective_axes:
        raise eqn.unsupported(f"run_scoped with collective_axes={collective_axes}")
    plan = eqn.plan(jaxpr)
    return _run_scoped(plan, consts, _scoped_prototypes(plan, len(consts), eqn.options))


def _scoped_prototypes(plan, n_consts: int, options) -> list:
    """The body's allocations, allocated once (copied per entry, as pallas_call's scratch)."""
    inner = plan.jaxpr
    n_alloc = len(inner.invars) - (0 if len(inner.constvars) == n_consts else n_consts)
    return [_alloc_scratch(v.aval, f"run_scoped allocation {i}", None, options)
            for i, v in enumerate(inner.invars[len(inner.invars) - n_alloc:])]


def _run_scoped(plan, consts, prototypes) -> list:
    run = current_run()
    refs = [p.fresh(run) for p in prototypes]
    if len(plan.jaxpr.constvars) == len(consts):   # the operands are the body's constvars
        outs = plan.run(list(consts), refs)
    else:                                          # the body takes them as leading invars
        outs = plan.run([], list(consts) + refs)
    run.dma.check_exit([r for r in refs if r.kind == "semaphore"], "run_scoped")
    return outs


def _prepare_run_scoped(ctx):
    """Plan time: the body's plan and allocation prototypes once per equation."""
    if ctx.params.get("collective_axes"):
        return run_scoped    # (raises)
    plan = ctx.plan(ctx.params["jaxpr"])
    prototypes = _scoped_prototypes(plan, len(ctx.eqn.invars), ctx.options)
    return lambda eqn, *consts, **params: _run_scoped(plan, consts, prototypes)


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


@register("semaphore_signal", partial="signals to other devices unsupported (cores of a "
                                      "core mesh are supported)")
@_with_operands("args_tree", _sem_refs)
def semaphore_signal(eqn, *flat, args_tree, device_id_type=None, _operands=None):
    run = current_run()
    (target, index), (inc, device_id, core_index) = _sem_operand(eqn, flat, args_tree, _operands)
    if device_id is not None or core_index is not None:
        # A signal to another core of this kernel's core mesh: its copy of the semaphore.
        target = run.mesh.counterpart(target, _signalled_core(eqn, run, device_id,
                                                              device_id_type, core_index))
    run.dma.signal((target, index), inc)
    return []


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
                              f"core {core_index!r}: only the cores of a core-mesh kernel, named "
                              "by a dict of its core axes or core_index (other devices: remote)")
    return core


@register("semaphore_wait")
@_with_operands("args_tree", _sem_refs)
def semaphore_wait(eqn, *flat, args_tree, _operands=None):
    sem, (value, *rest) = _sem_operand(eqn, flat, args_tree, _operands)
    decrement = rest[0] if rest else True
    current_run().dma.wait(sem, value, decrement=decrement is None or bool(decrement))
    return []


@register("semaphore_read")
@_with_operands("args_tree", _sem_refs)
def semaphore_read(eqn, *flat, args_tree, _operands=None):
    sem, _ = _sem_operand(eqn, flat, args_tree, _operands)
    return np.asarray(current_run().dma.read_sem(sem)).astype(eqn.out_dtype)


@register("get_barrier_semaphore")
def get_barrier_semaphore(eqn, *, tag=None):
    # One barrier semaphore per kernel; with one device, barriers only ever signal this kernel.
    # The tag (JAX 0.12) names the collective id kernels on other devices share: no effect here.
    run = current_run()
    if run.barrier is None:
        run.barrier = KernelRef(np.zeros((), np.int64), "barrier semaphore", run,
                                kind="semaphore", check_bounds=run.options.check_bounds)
        if run.mesh is not None:
            run.mesh.barriers[run.core] = run.barrier
    return run.barrier


# -- DMAs ----------------------------------------------------------------------------------------

def _dma_operands(eqn, flat, tree):
    """((src ref, index), (dst ref, index), dst semaphore, src semaphore) of a DMA equation;
    a semaphore is (ref, index) or None."""
    src, dst, dst_sem, src_sem, device_id = tree.unflatten(flat)
    if device_id is not None:
        raise eqn.unsupported("remote DMA (device_id given): the reference runs one device")
    s_ref, s_idx, s_dt = indexing.resolve_transformed(eqn, src)
    d_ref, d_idx, d_dt = indexing.resolve_transformed(eqn, dst)
    if s_dt != s_ref.dtype or d_dt != d_ref.dtype:
        raise eqn.unsupported("DMA through a bitcast view")
    sems = []
    for sem in (dst_sem, src_sem):
        if sem is None:
            sems.append(None)
        else:
            ref, transforms = indexing.split_transformed(sem)
            sems.append(_sem(eqn, ref, transforms))
    return (s_ref, s_idx), (d_ref, d_idx), sems[0], sems[1]


def _dma_refs(parts):
    if parts[4] is not None:
        return None  # remote DMA: the generic path raises
    return [None if x is None else indexing.split_transformed(x) for x in parts[:4]]


def _dma_resolved(eqn, flat, tree, operands, run, start: bool, send: bool = False):
    """(src, src index, dst, dst index, dst sem, src sem, nbytes); nbytes is the checked byte
    count of the copy (start) or of the view a wait counts (the destination, or the source for a
    wait_send), None on the generic path."""
    if operands.ref_pos is None:
        (s, si), (d, di), ds, ss = _dma_operands(eqn, flat, tree)
        return s, si, d, di, ds, ss, None

    def derive():
        (s, si), (d, di), ds, ss = _dma_operands(eqn, flat, tree)
        if start:
            nbytes = run.dma.check(s, si, d, di)
        else:
            ref, index = (s, si) if send else (d, di)
            nbytes = view_bytes(ref, index)
        return si, di, None if ds is None else ds[1], None if ss is None else ss[1], nbytes

    (si, di, dsi, ssi, nbytes), (s, d, dsr, ssr) = operands.lookup(flat, derive)
    return (s, si, d, di, None if dsi is None else (dsr, dsi), None if ssi is None else (ssr, ssi),
            nbytes)


@register("dma_start", partial="local DMAs only (remote device_id unsupported)")
@_with_operands("tree", _dma_refs)
def dma_start(eqn, *flat, tree, add=False, _operands=None, **params):
    run = current_run()
    s, si, d, di, ds, ss, nbytes = _dma_resolved(eqn, flat, tree, _operands, run, start=True)
    run.dma.start(s, si, d, di, ds, ss, bool(add), nbytes=nbytes)
    return []


@register("dma_wait", partial="local DMAs only (remote device_id unsupported)")
@_with_operands("tree", _dma_refs)
def dma_wait(eqn, *flat, tree, is_wait_send=False, _operands=None, **params):
    run = current_run()
    send = bool(is_wait_send)
    s, si, d, di, ds, ss, nbytes = _dma_resolved(eqn, flat, tree, _operands, run, start=False,
                                                 send=send)
    if ds is None:
        raise eqn.unsupported("dma_wait without a semaphore")
    # A wait_send's arguments are pre-swapped by JAX: the semaphore waited on sits in the
    # destination-semaphore slot; the amount is the copied byte count either way (of the source
    # view for a wait_send).
    ref, index = (s, si) if send else (d, di)
    run.dma.wait_dma(ds, ref, index, send=send, nbytes=nbytes)
    return []


# -- TPU vector primitives -----------------------------------------------------------------------

@register("roll")
def roll(eqn, x, shift, *, axis, stride=None, stride_axis=None):
    # pltpu.roll: jnp.roll along ``axis``; with a stride, slice i along ``stride_axis`` is rolled
    # by shift + i * stride (jax/_src/pallas/mosaic/primitives.py, _roll_lowering_rule).
    x = np.asarray(x)
    shift = int(shift)
    if stride is None:
        return np.roll(x, shift, axis)
    parts = np.split(x, x.shape[stride_axis], stride_axis)
    return np.concatenate([np.roll(p, shift + i * stride, axis) for i, p in enumerate(parts)],
                          stride_axis)


@register("bitcast")
def bitcast(eqn, x, *, ty, dim=None):
    # pltpu.bitcast packs/unpacks consecutive elements along ``dim`` (second minor by default,
    # the only choice before JAX 0.12), element 0 in the low bits (little endian, as XLA's
    # bitcast_convert_type).
    x = np.asarray(x)
    ty = np.dtype(ty)
    dim = x.ndim - 2 if dim is None else dim
    if x.dtype.itemsize * 8 != _bits(x.dtype) or ty.itemsize * 8 != _bits(ty):
        raise eqn.unsupported(f"bitcast of sub-byte types {x.dtype} -> {ty}")
    y = np.ascontiguousarray(np.moveaxis(x, dim, -1)).view(ty)
    return np.ascontiguousarray(np.moveaxis(y, -1, dim))


def _bits(dtype):
    from ..dtypes import bit_width
    return bit_width(dtype)


# -- TPU hardware PRNG ---------------------------------------------------------------------------
# The hardware generator is undocumented and generation-specific; the reference uses the
# documented deterministic emulation of the PRNG family (interp.prng.pallas_tpu_bits). TPUs have a
# sequential generator per core: prng_seed sets its whole state, so the bits after a seed depend
# on the seeds and on the draws made since, never on the grid point (pltpu.sample_block's
# invariance over block shapes and iteration orders relies on this). The state lasts across grid
# steps. JAX's TPU interpret mode returns zeros.

def hardware_seed(run, seeds) -> None:
    """prng_seed: the core's PRNG state becomes a function of these 32-bit seeds."""
    run.prng = [np.array([int(np.asarray(s)) & 0xFFFFFFFF for s in seeds], np.int64), 0]


def hardware_bits(eqn, run, shape) -> np.ndarray:
    """prng_random_bits: the next uint32 draw of the core's PRNG."""
    from .. import prng
    if len(shape) < 2:
        raise eqn.unsupported(f"hardware random bits of shape {tuple(shape)}: Mosaic draws only "
                              "rank >= 2 blocks (lowering.py _prng_random_bits_lowering_rule: "
                              "'random_bits only supports rank>=2 outputs.')")
    if run.prng is None:
        raise UndefinedBehaviorError(f"{run.where()}: prng_random_bits before any prng_seed "
                                     "(the hardware PRNG state is undefined)")
    seeds, draw = run.prng
    run.prng[1] += 1
    return np.asarray(prng.pallas_tpu_bits(seeds, tuple(shape), draw=draw,
                                           options_seed=run.options.seed), np.uint32)


@register("prng_seed", partial="hardware PRNG emulated (interp.prng.pallas_tpu_bits): bits are "
                               "deterministic and well mixed but not the TPU's own")
def prng_seed(eqn, *seeds):
    if len(seeds) == 1 and hasattr(seeds[0], "impl"):
        # A Pallas PRNG key: its scalars are the seeds (mosaic lowering _prng_seed_lowering_rule,
        # KeyScalarBundle case).
        seeds = tuple(np.ravel(seeds[0].data))
    elif any(a.shape != () or np.dtype(a.dtype) not in _SEED_DTYPES for a in eqn.in_avals):
        # _prng_seed_lowering_rule: 'All seed data must be scalar integers'; tpu.prng_set_seed_32
        # verifies 32-bit operands (int64 seeds under jax_enable_x64 fail there too).
        raise eqn.unsupported("seeds " + ", ".join(str(a.str_short()) for a in eqn.in_avals)
                              + ": Mosaic seeds the hardware PRNG from scalar 32-bit integers")
    hardware_seed(current_run(), seeds)
    return []


_SEED_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


# A Pallas TPU key is a bundle of uint32 scalars (key shape (1, N)); split / join convert between
# the key and its scalars in order (mosaic lowering _split_key_lowering_rule / _join_key_...).

@register("prng_split")
def prng_split(eqn, key):
    data = np.asarray(key.data)
    if data.shape != (1, len(eqn.out_avals)):
        raise eqn.unsupported(f"prng_split of key data {list(data.shape)}")
    return [np.uint32(v) for v in data[0]]


@register("prng_join")
def prng_join(eqn, *scalars, impl):
    from .random import KeyArray, _pallas_kind
    if _pallas_kind(impl) != "key":   # _join_key_lowering_rule: "Can only join Pallas keys"
        raise eqn.unsupported(f"prng_join of {impl.name} keys: Mosaic joins only Pallas keys")
    return KeyArray(impl, np.array([[np.uint32(np.asarray(s)) for s in scalars]], np.uint32))


@register("prng_random_bits", partial="hardware PRNG emulated (interp.prng.pallas_tpu_bits)")
def prng_random_bits(eqn, *, shape):
    return hardware_bits(eqn, current_run(), shape).view(eqn.out_dtype)


# -- elementwise packing (pltpu.pack_elementwise / unpack_elementwise) --------------------------
# Defined by the docstrings of jax/_src/pallas/mosaic/primitives.py (and tpu.pack_elementwise):
# factor = bits(source) / bits(packed); source i goes to bits [i*w, (i+1)*w) of the result.

def _packing(eqn, wide, packed):
    from ..dtypes import bit_width
    wbits, pbits = bit_width(wide), bit_width(packed)
    if wbits % pbits or wbits > 32:
        raise eqn.unsupported(f"packing {packed} into {wide}")
    return wbits, pbits


@register("pack_elementwise", partial="integer packing only: f32 -> bf16 packing rounds in a way "
                                      "Mosaic does not document")
def pack_elementwise(eqn, *xs, packed_dtype):
    from ..dtypes import is_int
    src = xs[0].dtype
    if not (is_int(src) and is_int(packed_dtype)):
        raise eqn.unsupported(f"pack_elementwise {src} -> {np.dtype(packed_dtype)} (the rounding "
                              "of float packing is not documented)")
    wbits, pbits = _packing(eqn, src, packed_dtype)
    out = np.zeros(xs[0].shape, np.uint64)
    mask = np.uint64((1 << pbits) - 1)
    for i, x in enumerate(xs):  # integer packing truncates each source to its low bits
        low = np.asarray(x).astype(np.int64).astype(np.uint64) & mask
        out |= low << np.uint64(i * pbits)
    return out.astype(eqn.out_dtype)


@register("unpack_elementwise", partial="signed integer and bf16/f16 -> f32 unpacking only "
                                        "(unsigned fields: extension not documented)")
def unpack_elementwise(eqn, x, *, index, packed_dtype, unpacked_dtype):
    from ..dtypes import is_float, is_signed, storage_uint
    packed = np.dtype(packed_dtype)
    wbits, pbits = _packing(eqn, unpacked_dtype, packed)
    bits = np.ascontiguousarray(np.asarray(x)).view(storage_uint(x.dtype)).astype(np.uint64)
    field = (bits >> np.uint64(index * pbits)) & np.uint64((1 << pbits) - 1)
    out = np.dtype(unpacked_dtype)
    if is_float(packed) and is_float(out) and packed.itemsize * 8 == pbits:
        # The field is a packed float; widening it to the unpacked float is exact.
        return field.astype(storage_uint(packed)).view(packed).astype(out)
    if is_signed(packed) and is_signed(out):
        # index 0 is the low field, sign-extended ("s_y'y'" in the docstring)
        signed = field.astype(np.int64) - ((field >> np.uint64(pbits - 1)).astype(np.int64) << pbits)
        return signed.astype(out)
    raise eqn.unsupported(f"unpack_elementwise of {packed} fields into {out}")


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


@register("einshape_lo")
def einshape_lo(eqn, x, *, equation, sizes=(), assert_is_tile_preserving=False):
    # pltpu.einshape: the split / merge / transpose steps JAX derives from the equation.
    # assert_is_tile_preserving only asks the Mosaic lowering to refuse a relayout (per TPU
    # generation's tiling); the values are the same either way.
    from jax._src.pallas import einshape as _es
    x = np.asarray(x)
    for t in _es.get_einshape_transforms(equation, x.shape, **dict(sizes)):
        if type(t).__name__ == "Transpose":
            x = np.transpose(x, t.permutation)
        else:
            x = x.reshape(t.transform_shape(x.shape))
    return np.ascontiguousarray(x)


# Triton's debug barrier is the primitive "debug_barrier_p" up to JAX 0.11, "debug_barrier" from 0.12.
@register("debug_barrier", "debug_barrier_p", "add_dependency", "trace_value")
def no_value_effect(eqn, *args, label=None):
    # Synchronisation / scheduling / tracing markers: nothing observable in values.
    return [] if eqn.primitive.multiple_results else (args[0] if args else [])


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, val: val}


@register("atomic_rmw", partial="float max/min propagate NaN (Triton's integer-trick float "
                                "min/max leaves NaN handling undefined)")
def atomic_rmw(eqn, *flat, args_tree, atomic_type):
    # One kernel instance runs at a time, so an atomic is a read-modify-write; lanes that hit the
    # same element apply in row-major lane order (each addition rounded), and each lane returns
    # the value it saw.
    ref, transforms, val, mask = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    op = _ATOMIC[str(getattr(atomic_type, "value", atomic_type)).lower()]
    shape = eqn.out_aval.shape
    lanes = np.ones(shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
    coords = _coords(target, index, lanes)
    val = np.broadcast_to(np.asarray(val, target.dtype), shape)[lanes]
    old = target.masked_read(index, lanes, None) if mask is not None else target.read(index)
    flat_idx = np.ravel_multi_index(coords, target.shape) if coords else np.zeros(1, np.int64)
    seen = np.empty(val.shape, target.dtype)
    if len(np.unique(flat_idx)) == flat_idx.size:
        seen[...] = target.array[coords]
        new = op(seen, val).astype(target.dtype)
    else:
        seen_l = []
        current = {}
        for lane, pos in enumerate(flat_idx.tolist()):
            before = current.get(pos, target.array.reshape(-1)[pos])
            seen_l.append(before)
            current[pos] = op(before, val[lane]).astype(target.dtype)
        seen[...] = seen_l
        new = np.array([current[p] for p in flat_idx.tolist()], target.dtype)
    target.masked_write(index, _scatter(shape, lanes, new, target.dtype), lanes)
    out = np.array(old, copy=True)
    out[lanes] = seen
    return out.reshape(shape)


def _coords(ref, index, lanes):
    from ..pallas.memory import _selected_coords
    return _selected_coords(ref.shape, index, lanes)


def _scatter(shape, lanes, values, dtype):
    out = np.zeros(shape, dtype)
    out[lanes] = values
    return out


@register("atomic_cas")
def atomic_cas(eqn, ref, cmp, val):
    old = ref.read(())
    if old == cmp:
        ref.write((), val)
    return np.asarray(old)


@register("has_memory_space")
def has_memory_space(eqn, ref, *, memory_space):
    # Where the compiler places a pl.ANY operand is its choice; the reference keeps every ANY
    # operand in HBM (interp.pallas.grid: whole operands), so only HBM answers True.
    name = str(getattr(memory_space, "value", memory_space)).lower()
    return np.bool_(name == "hbm")


@register("get_global")
def get_global(eqn, *, what):
    # One buffer per get_global equation for the whole call: every grid step (and every core of a
    # core mesh) sees the same one. JAX's interpret mode cannot discharge it.
    run = current_run()
    owner = run.mesh if run.mesh is not None else run
    ref = owner.globals.get(eqn)
    if ref is None:
        ref = owner.globals[eqn] = _alloc_scratch(what, "global", run, run.options)
    return ref
